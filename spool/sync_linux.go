package spool

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData is fdatasync: the data and what is needed to read it back.
func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// openFile opens a regular file for blocking I/O. os.OpenFile first tries to
// put every file in the network poller, which a regular file refuses: five
// wasted system calls per open, on the path of every message.
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}
