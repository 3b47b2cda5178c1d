//go:build linux || darwin || freebsd

package relay

import "golang.org/x/sys/unix"

// statfs is the free space and inodes of dir's file system; inodes is -1
// when the file system does not count them.
func statfs(dir string) (free uint64, inodes int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	inodes = -1
	if st.Files > 0 {
		inodes = int64(st.Ffree)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), inodes, nil
}
