"""Which files a candidate sent by `path` may be, and how the front reads one.

A request names a path on the service's machine; the front reads it as its own user, who may
read far more than a client of the port should (a service run as root reads /etc/shadow, and a
run's traceback shows a file's first line). So the front reads only files under the folders it
was started with (`serve --candidates-dir DIR`, repeatable); started with none, it refuses every
path. The rule, in the order it is checked:

- the path is text without NUL and without a `..` component; a relative one is taken under the
  first folder;
- it lies under a folder as written, before any file is touched (no answer tells whether a file
  outside exists);
- with every symbolic link followed, it still lies under a folder (as resolved when the service
  started);
- the file opened is a regular file that is, as the kernel names the open file, under a folder
  and not deleted: a link swapped between the check and the open is caught here, where nothing
  can swap it any more;
- the file has no other name (one link): a hard link in the folder to a file outside is, as the
  kernel names the open file, under the folder, and nothing tells which of its names is the
  real one.

The file is read once, into the request: the bytes judged are the bytes hashed, whatever the
file holds later.
"""

import os
import stat
from pathlib import Path, PurePosixPath

NO_FOLDERS = ("this service reads no candidate files: send the file's `source`, or start the service with "
              "`serve --candidates-dir DIR` to take paths under DIR")


class CandidateFiles:
    def __init__(self, folders=(), max_bytes: int = 1_000_000):
        self.written = tuple(Path(os.path.abspath(folder)) for folder in folders)
        self.resolved = tuple(Path(os.path.realpath(folder)) for folder in folders)
        self.max_bytes = max_bytes

    def outside(self) -> str:
        return f"a candidate's path must lie under a folder the service reads candidates from: {', '.join(map(str, self.written))}"

    def read(self, path: str) -> str:
        """The text of the file `path` names, where the rule above lets the front read it;
        ValueError naming why not otherwise."""
        if not self.written:
            raise ValueError(NO_FOLDERS)
        if not path or "\0" in path:
            raise ValueError("a candidate's path must be a non-empty text without NUL")
        if ".." in PurePosixPath(path).parts:
            raise ValueError("a candidate's path must not have a `..` component")
        candidate = Path(os.path.normpath(self.written[0] / path))  # an absolute `path` replaces the folder
        if not _under(candidate, self.written + self.resolved):
            raise ValueError(self.outside())
        try:
            # realpath reads each link it meets; one changed under it raises (a link gone).
            real = Path(os.path.realpath(candidate))
            if not _under(real, self.resolved):
                raise ValueError(self.outside())
            descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as error:
            raise ValueError(f"a candidate's path cannot be read: {error.strerror}") from None
        try:
            found = os.fstat(descriptor)
            if not stat.S_ISREG(found.st_mode):
                raise ValueError("a candidate's path must name a regular file")
            if found.st_nlink == 0 or not _under(_opened_path(descriptor), self.resolved):
                raise ValueError(self.outside())
            if found.st_nlink > 1:
                raise ValueError("a candidate's file must have no other name (it has hard links): copy it into the folder")
            with open(descriptor, "rb", closefd=False) as file:
                data = file.read(self.max_bytes + 1)
        finally:
            os.close(descriptor)
        if len(data) > self.max_bytes:
            raise ValueError(f"the file is over {self.max_bytes} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"a candidate's file must be UTF-8 text ({error.reason} at byte {error.start})") from None


def _opened_path(descriptor: int) -> Path | None:
    """Where the kernel says the open file is; None where /proc cannot tell."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{descriptor}"))
    except OSError:
        return None


def _under(path: Path | None, folders: tuple[Path, ...]) -> bool:
    return path is not None and path.is_absolute() and any(path.is_relative_to(folder) for folder in folders)
