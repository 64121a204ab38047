package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/enix/kuik/internal/testnode"
)

// flapper is an OCI registry (go-containerregistry's, in memory) whose listener can be taken
// down and brought back on the same address: down, nothing listens (connections are refused)
// and the connections it had are closed, as when a registry restarts.
type flapper struct {
	addr    string
	handler http.Handler

	mu  sync.Mutex
	srv *http.Server // nil while down

	ups, downs atomic.Int64
	// manifests counts manifest requests by client: "kuik-webhook" (the probes), "containerd"
	// (the kubelet's pulls) or "other".
	reqMu     sync.Mutex
	manifests map[string]int
}

func newFlapper() (*flapper, error) {
	f := &flapper{manifests: map[string]int{}}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			client := "other"
			switch ua := r.UserAgent(); {
			case strings.Contains(ua, "kuik-webhook"):
				client = "kuik-webhook"
			case strings.Contains(ua, "containerd"):
				client = "containerd"
			}
			f.reqMu.Lock()
			f.manifests[client+" "+r.Method]++
			f.reqMu.Unlock()
		}
		inner.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", testnode.NodeIP+":0")
	if err != nil {
		return nil, fmt.Errorf("flapping registry: %w", err)
	}
	f.addr = l.Addr().String()
	f.serve(l)
	return f, nil
}

func (f *flapper) serve(l net.Listener) {
	srv := &http.Server{Handler: f.handler, ReadHeaderTimeout: 10 * time.Second}
	f.srv = srv
	go func() { _ = srv.Serve(l) }()
}

// up listens again on the same address.
func (f *flapper) up() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv != nil {
		return nil
	}
	var l net.Listener
	var err error
	// The port is ours; a moment may pass before the kernel lets it be bound again.
	for range 50 {
		if l, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("flapping registry: listening again on %s: %w", f.addr, err)
	}
	f.serve(l)
	f.ups.Add(1)
	return nil
}

// down closes the listener and every connection.
func (f *flapper) down() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.srv == nil {
		return
	}
	_ = f.srv.Close()
	f.srv = nil
	f.downs.Add(1)
}

// flap takes the registry down and brings it up again, each state lasting period on average,
// until ctx ends, then leaves it up. Each duration is drawn in [period/2, 3*period/2): a strictly
// periodic flap aliases with the kubelet's pull back-off (10s, 20s, 40s...: multiples of a 2s
// cycle), so a pod whose first pull met a down window would meet one at every retry.
func (f *flapper) flap(ctx context.Context, period time.Duration) error {
	isUp := true
	for {
		d := period/2 + rand.N(period)
		select {
		case <-ctx.Done():
			return f.up()
		case <-time.After(d):
		}
		if isUp {
			f.down()
		} else if err := f.up(); err != nil {
			return err
		}
		isUp = !isUp
	}
}

// requests returns and resets the manifest request counts.
func (f *flapper) requests() map[string]int {
	f.reqMu.Lock()
	defer f.reqMu.Unlock()
	m := f.manifests
	f.manifests = map[string]int{}
	return m
}
