package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/enix/kuik/internal/benchutil"
)

// profiler takes CPU profiles of one webhook process while a batch runs, one second at a time
// (the process serves net/http/pprof), into files of -profile's directory named after the
// mode, scenario and round: go tool pprof -top DIR/kuik-covered-rewritten-* merges them.
type profiler struct {
	stop chan struct{}
	done sync.WaitGroup
	err  error
}

var nameless = regexp.MustCompile(`[^a-z0-9]+`)

// startProfile starts taking profiles of the process serving pprof at addr, none when addr
// or -profile is empty.
func startProfile(ctx context.Context, addr string, m mode, s scenario, r int) *profiler {
	p := &profiler{stop: make(chan struct{})}
	if *flagProfile == "" || addr == "" {
		return p
	}
	prefix := filepath.Join(*flagProfile, strings.Trim(nameless.ReplaceAllString(m.String()+"-"+s.name, "-"), "-")+fmt.Sprintf("-r%d-", r))
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		for k := 0; ; k++ {
			select {
			case <-p.stop:
				return
			default:
			}
			if p.err = fetchProfile(ctx, "http://"+addr+"/debug/pprof/profile?seconds=1", fmt.Sprintf("%s%03d.pb.gz", prefix, k)); p.err != nil {
				return
			}
		}
	}()
	return p
}

// end waits for the profile being taken, and tells whether one failed.
func (p *profiler) end() error {
	close(p.stop)
	p.done.Wait()
	return p.err
}

func fetchProfile(ctx context.Context, url, file string) error {
	b, err := benchutil.Get(ctx, url)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// servePprof serves net/http/pprof at addr (the no-op webhook's, as kuik's webhook does with
// --pprof-bind-address).
func servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
}
