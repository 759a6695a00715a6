// Package testport hands out loopback ports for tests that must write fixed
// ports into a config file (envoy.yaml) before the process that binds them
// starts.
//
// A port taken from listen(":0") and closed again is a poor choice: the
// kernel hands the same ephemeral range to outgoing connections and to the
// next listen(":0"), so two "free" ports can turn out equal, or a client's
// source port can take one before the proxy binds it. Ports here come from
// below the kernel's ephemeral range, are checked bindable, and are never
// handed out twice by one process.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Pick returns a loopback TCP port that was bindable a moment ago and that
// this process has not returned before.
func Pick() (int, error) {
	lo, hi := window()
	mu.Lock()
	defer mu.Unlock()
	for range 2000 {
		p := lo + rand.IntN(hi-lo)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		issued[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("testport: no free port in %d-%d", lo, hi)
}

// window is the range ports are drawn from: the 12 000 ports just below the
// ephemeral range (Linux default 32768), so neither outgoing connections nor
// other tests' listen(":0") take them. The process id picks the half, which
// keeps two test binaries running side by side mostly apart.
func window() (lo, hi int) {
	eph := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, b int
		if n, _ := fmt.Sscan(string(raw), &a, &b); n == 2 && a > 12000 {
			eph = a
		}
	}
	lo = eph - 12000
	if os.Getpid()%2 == 1 {
		lo += 6000
	}
	return lo, lo + 6000
}
