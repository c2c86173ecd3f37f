"""Local stand-in for the GPU MODE evaluation of nvfp4_gemm, with speed-of-light reporting."""
