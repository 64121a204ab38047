package missedpulls

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
)

// listPage is how many events one list request asks for. It bounds no memory (a page is read
// as a stream, one event at a time): it bounds how long the API server serves one request.
const listPage = 50

// listEvents lists the matching events page by page (a consistent snapshot: resourceVersion
// unset), observing each event as it is decoded, and returns an empty list at the snapshot's
// resourceVersion for the reflector to watch from: the reflector's own pager, or its
// watch-list temporary store, would hold every matching event of the cluster at once.
func (w *Watcher) listEvents(ctx context.Context, selector string) (*corev1.EventList, error) {
	o := metav1.ListOptions{FieldSelector: selector, Limit: listPage}
	rv := ""
	for {
		meta, err := w.listEventsPage(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("listing events (%s): %w", selector, err)
		}
		if rv == "" {
			rv = meta.ResourceVersion
		}
		if meta.Continue == "" {
			return &corev1.EventList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}, nil
		}
		o.Continue = meta.Continue
	}
}

// listEventsPage reads one page of events as a JSON stream, decoding and observing one event at
// a time, and returns the page's list metadata. core/v1 events have no size limit but the
// largest object the API server stores (etcd's --max-request-bytes, 1.5 MiB by default): a
// client that reads a page whole (client-go's List does) holds the page's bytes and then all its
// events decoded, up to the page size times that; this holds what it has read of one event and
// that event decoded.
func (w *Watcher) listEventsPage(ctx context.Context, o metav1.ListOptions) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	body, err := w.core.RESTClient().Get().Resource("events").
		VersionedParams(&o, scheme.ParameterCodec).
		SetHeader("Accept", runtime.ContentTypeJSON).
		Stream(ctx)
	if err != nil {
		return meta, err
	}
	defer func() { _ = body.Close() }()
	dec := json.NewDecoder(body)
	if err := delim(dec, '{'); err != nil {
		return meta, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return meta, fmt.Errorf("reading an event list: %w", err)
		}
		switch tok {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, fmt.Errorf("reading an event list's metadata: %w", err)
			}
		case "items":
			if err := delim(dec, '['); err != nil {
				return meta, err
			}
			for dec.More() {
				ev := &corev1.Event{}
				if err := dec.Decode(ev); err != nil {
					return meta, fmt.Errorf("reading an event: %w", err)
				}
				w.observe(ev)
			}
			if err := delim(dec, ']'); err != nil {
				return meta, err
			}
		default: // kind, apiVersion
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return meta, fmt.Errorf("reading an event list: %w", err)
			}
		}
	}
	return meta, delim(dec, '}')
}

// delim reads the JSON delimiter want.
func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("reading an event list: %w", err)
	}
	if tok != want {
		return fmt.Errorf("reading an event list: got %v, want %v", tok, want)
	}
	return nil
}

// pagedListWatch tells the reflector not to use watch-list (client-go's WatchListClient): its
// initial events would fill a temporary store of every matching event; listEvents pages.
type pagedListWatch struct{ *toolscache.ListWatch }

// IsWatchListSemanticsUnSupported implements client-go's watchlist opt-out.
func (pagedListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// triggerStore is a reflector's store that keeps nothing: each object listed or watched is
// handed to fn, so the events cost no memory beyond the one being read.
type triggerStore struct{ fn func(any) }

func (s triggerStore) Add(obj any) error    { s.fn(obj); return nil }
func (s triggerStore) Update(obj any) error { s.fn(obj); return nil }
func (triggerStore) Delete(any) error       { return nil }
func (s triggerStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		s.fn(obj)
	}
	return nil
}
func (triggerStore) Resync() error { return nil }
