package webhook

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/enix/kuik/internal/route"
)

// before is what a patch is computed against: the parts of the pod route.Route may change,
// which are its records (route.RecordAnnotations, route.RecordLabels), not the whole maps.
type before struct {
	annotations    [len(route.RecordAnnotations)]entry
	labels         [len(route.RecordLabels)]entry
	hadAnnotations bool
	hadLabels      bool
	pullSecrets    int
	hadPullSecrets bool
	// annotationsSize is annotationsSize(pod.Annotations).
	annotationsSize int
}

// entry is a map member: its value, and whether it is there.
type entry struct {
	value string
	ok    bool
}

func snapshot(pod *corev1.Pod) before {
	b := before{
		hadAnnotations: pod.Annotations != nil,
		hadLabels:      pod.Labels != nil,
		pullSecrets:    len(pod.Spec.ImagePullSecrets),
		hadPullSecrets: pod.Spec.ImagePullSecrets != nil,

		annotationsSize: annotationsSize(pod.Annotations),
	}
	for i, k := range route.RecordAnnotations {
		b.annotations[i].value, b.annotations[i].ok = pod.Annotations[k]
	}
	for i, k := range route.RecordLabels {
		b.labels[i].value, b.labels[i].ok = pod.Labels[k]
	}
	return b
}

// patch is the JSON patch from the snapshot to the routed pod, nil when nothing changed.
// route.Route knows exactly what it changed, so the patch is written directly, as the bytes
// json.Marshal gives for the same []jsonpatch.Operation, rather than diffed from two
// serializations or encoded by reflection, which would cost more than the routing itself.
func patch(b before, pod *corev1.Pod, decisions []route.Decision) []byte {
	var w patchWriter
	for _, d := range decisions {
		if d.Image != d.Original {
			w.op("replace", d.Path)
			w.value()
			w.string(d.Image)
			w.end()
		}
	}
	w.mapOps("/metadata/annotations", b.hadAnnotations, route.RecordAnnotations[:], b.annotations[:], pod.Annotations)
	w.mapOps("/metadata/labels", b.hadLabels, route.RecordLabels[:], b.labels[:], pod.Labels)
	if added := pod.Spec.ImagePullSecrets[min(b.pullSecrets, len(pod.Spec.ImagePullSecrets)):]; len(added) > 0 {
		if !b.hadPullSecrets {
			w.op("add", "/spec/imagePullSecrets")
			w.value()
			w.b = append(w.b, '[')
			for i, r := range added {
				if i > 0 {
					w.b = append(w.b, ',')
				}
				w.ref(r)
			}
			w.b = append(w.b, ']')
			w.end()
		} else {
			for _, r := range added {
				w.op("add", "/spec/imagePullSecrets/-")
				w.value()
				w.ref(r)
				w.end()
			}
		}
	}
	if w.b == nil {
		return nil
	}
	return append(w.b, ']')
}

// patchWriter appends JSON patch operations.
type patchWriter struct{ b []byte }

// op opens an operation: {"op":…,"path":…
func (w *patchWriter) op(op, path string) {
	if w.b == nil {
		w.b = make([]byte, 0, 512)
		w.b = append(w.b, '[')
	} else {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, `{"op":`...)
	w.string(op)
	w.b = append(w.b, `,"path":`...)
	w.string(path)
}

func (w *patchWriter) value() { w.b = append(w.b, `,"value":`...) }
func (w *patchWriter) end()   { w.b = append(w.b, '}') }

func (w *patchWriter) string(s string) { w.b = appendString(w.b, s) }

func (w *patchWriter) ref(r corev1.LocalObjectReference) {
	w.b = append(w.b, `{"name":`...)
	w.string(r.Name)
	w.b = append(w.b, '}')
}

// mapOps writes the operations that turn the members keys of a map from old (by key, in the
// order of keys, which is sorted) into those of cur: the whole map when it did not exist, else
// the members removed, then those added or changed.
func (w *patchWriter) mapOps(path string, existed bool, keys []string, old []entry, cur map[string]string) {
	changed := false
	for i, k := range keys {
		if v, ok := cur[k]; ok != old[i].ok || v != old[i].value {
			changed = true
			break
		}
	}
	if !changed {
		return
	}
	if !existed {
		w.op("add", path)
		w.value()
		w.b = append(w.b, '{')
		// The map is new, so it holds only members route.Route wrote, which are among keys; the
		// other case is written all the same.
		present := 0
		for _, k := range keys {
			if _, ok := cur[k]; ok {
				present++
			}
		}
		sorted := keys
		if present != len(cur) {
			sorted = slices.Sorted(maps.Keys(cur))
		}
		first := true
		for _, k := range sorted {
			if v, ok := cur[k]; ok {
				if !first {
					w.b = append(w.b, ',')
				}
				first = false
				w.string(k)
				w.b = append(w.b, ':')
				w.string(v)
			}
		}
		w.b = append(w.b, '}')
		w.end()
		return
	}
	for i, k := range keys {
		if _, ok := cur[k]; !ok && old[i].ok {
			w.op("remove", path+"/"+escape(k))
			w.end()
		}
	}
	for i, k := range keys {
		// "add" on an existing member replaces it (RFC 6902 §4.1).
		if v, ok := cur[k]; ok && (!old[i].ok || old[i].value != v) {
			w.op("add", path+"/"+escape(k))
			w.value()
			w.string(v)
			w.end()
		}
	}
}

// appendString appends s as json.Marshal writes it: between quotes, with a backslash before
// each quote and backslash, when it is otherwise printable ASCII with nothing to escape (what
// kuik writes, its records included, and nearly every image and name); by json.Marshal itself
// otherwise.
func appendString(b []byte, s string) []byte {
	start := len(b)
	b = append(b, '"')
	copied := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case plain[c]:
		case c == '"' || c == '\\':
			b = append(b, s[copied:i]...)
			b = append(b, '\\', c)
			copied = i + 1
		default:
			q, err := json.Marshal(s)
			if err != nil { // json.Marshal never fails on a string
				panic(err)
			}
			return append(b[:start], q...)
		}
	}
	b = append(b, s[copied:]...)
	return append(b, '"')
}

// plain holds the bytes json.Marshal copies into a string as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escape makes a map key a JSON pointer token (RFC 6901).
func escape(s string) string { return pointerEscaper.Replace(s) }
