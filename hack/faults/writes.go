package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/enix/kuik/internal/benchutil"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// secretApplies is the API server's count of apply requests on Secrets (every code), from its
// own metrics: the requests of every syncer process, including one killed since.
func (e *env) secretApplies(ctx context.Context) (float64, error) {
	m, err := benchutil.APIServerMetrics(ctx, e.cs)
	if err != nil {
		return 0, err
	}
	return m.Sum("apiserver_request_total{", `resource="secrets"`, `verb="APPLY"`, `subresource=""`), nil
}

// writes counts the Secret writes (ADDED, MODIFIED) the API server reports on the syncer's
// Secrets, per namespace/name, from a watch started now.
type writes struct {
	mu     sync.Mutex
	byPair map[string]int
	times  map[string][]time.Time
	total  atomic.Int64
	stop   context.CancelFunc
	broken atomic.Bool
	// resumed counts the watches the API server ended and that were resumed.
	resumed atomic.Int64
}

func (e *env) watchWrites(ctx context.Context) (*writes, error) {
	sel := v1alpha1.LabelManagedBy + "=" + v1alpha1.ManagedBySecretSyncer
	list, err := e.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	ws := &writes{byPair: map[string]int{}, times: map[string][]time.Time{}, stop: cancel}
	rv := list.ResourceVersion
	w, err := e.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		// The API server ends a watch now and then (timeout, slow consumer): resume from the
		// last resource version seen, so that no write goes uncounted.
		for {
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added, watch.Modified, watch.Bookmark:
					s, ok := ev.Object.(*corev1.Secret)
					if !ok {
						continue
					}
					rv = s.ResourceVersion
					if ev.Type == watch.Bookmark {
						continue
					}
					k := s.Namespace + "/" + s.Name
					ws.mu.Lock()
					ws.byPair[k]++
					ws.times[k] = append(ws.times[k], time.Now())
					ws.mu.Unlock()
					ws.total.Add(1)
				case watch.Error:
					ws.broken.Store(true)
				}
			}
			if ctx.Err() != nil {
				return
			}
			ws.resumed.Add(1)
			if w, err = e.cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true}); err != nil {
				ws.broken.Store(true)
				return
			}
		}
	}()
	return ws, nil
}

// histogram is how many pairs were written 0, 1, 2… times, over the keys given.
func (ws *writes) histogram(keys []string) map[int]int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	h := map[int]int{}
	for _, k := range keys {
		h[ws.byPair[k]]++
	}
	return h
}

func (ws *writes) count(key string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byPair[key]
}

func formatHistogram(h map[int]int) string {
	var ks []int
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%d pairs written %d×", h[k], k))
	}
	return strings.Join(parts, ", ")
}

func pairKeys(name string, namespaces []string) []string {
	secret := routing.PullSecretName(routing.KindImageAlternative, name)
	keys := make([]string, len(namespaces))
	for i, ns := range namespaces {
		keys[i] = ns + "/" + secret
	}
	return keys
}
