//go:build !linux && !darwin && !freebsd

package relay

func statfs(string) (uint64, int64, error) { return 0, 0, errNoStatfs }
