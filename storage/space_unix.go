//go:build unix

package storage

import "golang.org/x/sys/unix"

// freeSpace is statfs: the bytes an unprivileged writer may still use.
func freeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:unconvert // Bsize is int64 on Linux, uint32 on Darwin
}
