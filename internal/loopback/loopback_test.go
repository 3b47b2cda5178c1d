package loopback

import "testing"

func TestHost(t *testing.T) {
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LocalHost:8525", true},
		{"127.0.0.1", true},
		{"127.1.2.3:2525", true},
		{"[::1]:8525", true},
		{"::1", true},
		{"[::1]", true},
		{"0.0.0.0", false},
		{"192.168.1.10:8525", false},
		{"evil.example", false},
		{"localhost.evil.example", false},
		{"", false},
	} {
		if got := Host(tt.host); got != tt.want {
			t.Errorf("Host(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}
