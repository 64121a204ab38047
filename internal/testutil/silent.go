package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// SilentRegistry accepts TCP connections and never answers: the worst registry there is, an
// upstream whose load balancer is up and whose backends are gone. It counts the connections
// open at once.
type SilentRegistry struct {
	// Host is its host:port.
	Host string

	open, max atomic.Int64
	accepted  atomic.Int64
}

// NewSilentRegistry starts a SilentRegistry on 127.0.0.1, closed with the test.
func NewSilentRegistry(t testing.TB) *SilentRegistry {
	t.Helper()
	return NewSilentRegistryAt(t, "127.0.0.1:0")
}

// NewSilentRegistryAt is NewSilentRegistry listening on addr (a node's address, for instance).
func NewSilentRegistryAt(t testing.TB, addr string) *SilentRegistry {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &SilentRegistry{Host: l.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			n := s.open.Add(1)
			for m := s.max.Load(); n > m && !s.max.CompareAndSwap(m, n); m = s.max.Load() {
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				// Read until the client gives up; answer nothing.
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						s.open.Add(-1)
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return s
}

// MaxOpen is the most connections that were open at once.
func (s *SilentRegistry) MaxOpen() int64 { return s.max.Load() }

// Accepted is the number of connections accepted in all.
func (s *SilentRegistry) Accepted() int64 { return s.accepted.Load() }

// DeadAddr is a 127.0.0.1:port where nothing listens: connections to it are refused.
func DeadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
