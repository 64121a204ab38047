package route

import (
	"encoding/json"
	"fmt"
	"iter"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// Pod records are kuik's annotations on a pod, by container: original-images, rewritten-by,
// reason and dry-run. Route reads and writes them; the secret-syncer's pod cache reads them
// through RewrittenContainers. Both read them with readMap (or readEntries, which gives the
// same), so they agree on what a record says.

// RecordAnnotations are the annotations of a pod Route writes, sorted, and RecordLabels its
// labels: Route changes nothing else of a pod's metadata, so a patch need only compare these.
var (
	RecordAnnotations = [...]string{v1alpha1.AnnotationDryRun, v1alpha1.AnnotationOriginalImages, v1alpha1.AnnotationReason, v1alpha1.AnnotationRewrittenBy}
	RecordLabels      = [...]string{v1alpha1.LabelRewritten}
)

// records are a pod's records as Route reads and rewrites them.
type records struct {
	originals, rewrittenBy, reasons entries
	// dryRun is kuik.enix.io/dry-run, kept as raw JSON values by container.
	dryRun map[string]json.RawMessage
}

func readRecords(annotations map[string]string) records {
	return records{
		originals:   readEntries(annotations, v1alpha1.AnnotationOriginalImages),
		rewrittenBy: readEntries(annotations, v1alpha1.AnnotationRewrittenBy),
		reasons:     readEntries(annotations, v1alpha1.AnnotationReason),
		dryRun:      readRawMap(annotations, v1alpha1.AnnotationDryRun),
	}
}

// entries are one of the records that map a container to a string, sorted by container, each
// container once: what readMap gives, without a map (a pod's records are few, and a map costs
// more to make than to search).
type entries []entry

type entry struct{ container, value string }

func (es entries) find(container string) (int, bool) {
	return slices.BinarySearchFunc(es, container, func(e entry, c string) int { return strings.Compare(e.container, c) })
}

func (es entries) get(container string) (string, bool) {
	if i, ok := es.find(container); ok {
		return es[i].value, true
	}
	return "", false
}

func (es *entries) set(container, value string) {
	if i, ok := es.find(container); ok {
		(*es)[i].value = value
	} else {
		*es = slices.Insert(*es, i, entry{container, value})
	}
}

func (es *entries) delete(container string) {
	if i, ok := es.find(container); ok {
		*es = slices.Delete(*es, i, i+1)
	}
}

// readEntries is readMap's record as entries; nil when there is none.
func readEntries(annotations map[string]string, key string) entries {
	v, ok := annotations[key]
	if !ok || v == "" {
		return nil
	}
	if es, ok := decodePlainEntries(v); ok {
		return es
	}
	m := readMap(annotations, key)
	if m == nil {
		return nil
	}
	es := make(entries, 0, len(m))
	for c, v := range m {
		es = append(es, entry{c, v})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.container, b.container) })
	return es
}

// Rewritten is a container the pod's records say a resource rewrote.
type Rewritten struct {
	// Container is its name, Image its current image, Original the image before.
	Container, Image, Original string
	By                         routing.Source
}

// RewrittenContainers yields, in the pod's order (init, regular, ephemeral), each container
// that has a recorded original and whose rewritten-by names a resource (RewrittenBy). A record
// of a container the pod lacks, or naming no resource, is skipped. It checks no bound: the
// webhook and the secret-syncer each count routing.RecordBytes of what it yields.
func RewrittenContainers(pod *corev1.Pod) iter.Seq[Rewritten] {
	return func(yield func(Rewritten) bool) {
		by := readEntries(pod.Annotations, v1alpha1.AnnotationRewrittenBy)
		if len(by) == 0 {
			return
		}
		originals := readEntries(pod.Annotations, v1alpha1.AnnotationOriginalImages)
		each := func(name, image string) bool {
			original, has := originals.get(name)
			if !has {
				return true
			}
			// What RewrittenBy keeps: a source that parses and is not the original.
			s, named := by.get(name)
			if !named {
				return true
			}
			src, err := routing.ParseSource(s)
			if err != nil || src.IsOriginal() {
				return true
			}
			return yield(Rewritten{Container: name, Image: image, Original: original, By: src})
		}
		// containersOf's order, without its slice.
		for i := range pod.Spec.InitContainers {
			if c := &pod.Spec.InitContainers[i]; !each(c.Name, c.Image) {
				return
			}
		}
		for i := range pod.Spec.Containers {
			if c := &pod.Spec.Containers[i]; !each(c.Name, c.Image) {
				return
			}
		}
		for i := range pod.Spec.EphemeralContainers {
			if c := &pod.Spec.EphemeralContainers[i]; !each(c.Name, c.Image) {
				return
			}
		}
	}
}

// OriginalImages is the original-images record: the original image by container. nil when
// there is none, or when it is not a JSON object of strings.
func OriginalImages(annotations map[string]string) map[string]string {
	m := readMap(annotations, v1alpha1.AnnotationOriginalImages)
	if len(m) == 0 {
		return nil
	}
	return m
}

// RewrittenBy is the resource the rewritten-by record names, by container; a value that does
// not parse, or names the original, is left out. nil when there is none.
func RewrittenBy(annotations map[string]string) map[string]routing.Source {
	m := readMap(annotations, v1alpha1.AnnotationRewrittenBy)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]routing.Source, len(m))
	for container, s := range m {
		if src, err := routing.ParseSource(s); err == nil && !src.IsOriginal() {
			out[container] = src
		}
	}
	return out
}

// usedEntry is an entry of a resource that a true record shows the pod already pulls from.
type usedEntry struct {
	source   routing.Source
	authPath string
}

// verify drops the records kuik could not have written and returns the containers whose record
// is true (routed before) and the entries those containers pull from.
func verify(rec *records, all []container, ix *routing.Index, podLabels, namespaceLabels labels.Set) (done map[string]bool, used map[usedEntry]bool) {
	if len(rec.originals) == 0 && len(rec.rewrittenBy) == 0 && len(rec.reasons) == 0 {
		return nil, nil // nothing to verify (a pod kuik never saw): nothing to allocate
	}
	images := make(map[string]string, len(all))
	for _, c := range all {
		images[c.name] = *c.image
	}
	done = map[string]bool{}
	used = map[usedEntry]bool{}
	rec.originals = slices.DeleteFunc(rec.originals, func(e entry) bool {
		name, original := e.container, e.value
		current, exists := images[name]
		by, _ := rec.rewrittenBy.get(name)
		src, err := routing.ParseSource(by)
		if exists && err == nil {
			if cands := ix.Recorded(original, current, src, podLabels, namespaceLabels); len(cands) > 0 {
				done[name] = true
				for _, c := range cands {
					if c.Inject {
						used[usedEntry{c.Source, c.AuthPath}] = true
					}
				}
				return false
			}
		}
		rec.reasons.delete(name)
		return true
	})
	rec.rewrittenBy = slices.DeleteFunc(rec.rewrittenBy, func(e entry) bool { return !done[e.container] })
	rec.reasons = slices.DeleteFunc(rec.reasons, func(e entry) bool {
		_, exists := images[e.container]
		return !exists || (!done[e.container] && e.value != v1alpha1.ReasonNoAlternatives)
	})
	return done, used
}

// write puts the records back on the pod: each annotation as a JSON map, or removed when empty,
// and the kuik.enix.io/rewritten label exactly when a container is recorded as rewritten.
func (rec *records) write(pod *corev1.Pod) error {
	recs := [...]struct {
		key   string
		es    entries
		plain bool
		value string
	}{
		{key: v1alpha1.AnnotationOriginalImages, es: rec.originals},
		{key: v1alpha1.AnnotationRewrittenBy, es: rec.rewrittenBy},
		{key: v1alpha1.AnnotationReason, es: rec.reasons},
	}
	// The plain ones are written into one string, which each annotation is a part of.
	size := 0
	for i := range recs {
		if n, ok := plainSize(recs[i].es); ok && len(recs[i].es) > 0 {
			recs[i].plain, size = true, size+n
		}
	}
	var b strings.Builder
	b.Grow(size)
	var ends [len(recs)]int
	for i := range recs {
		if recs[i].plain {
			writeEntries(&b, recs[i].es)
		}
		ends[i] = b.Len()
	}
	all := b.String()
	prev := 0 // where the record's part of all starts
	for i := range recs {
		r := &recs[i]
		start, end := prev, ends[i]
		prev = end
		if len(r.es) == 0 {
			delete(pod.Annotations, r.key)
			continue
		}
		if r.plain {
			r.value = all[start:end]
		} else {
			v, err := encodeEntries(r.es) // sorted by container: the annotation is deterministic
			if err != nil {
				return fmt.Errorf("encoding %s: %w", r.key, err)
			}
			r.value = v
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[r.key] = r.value
	}
	if len(rec.dryRun) == 0 {
		delete(pod.Annotations, v1alpha1.AnnotationDryRun)
	} else {
		b, err := json.Marshal(rec.dryRun) // sorted keys
		if err != nil {
			return fmt.Errorf("encoding %s: %w", v1alpha1.AnnotationDryRun, err)
		}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[v1alpha1.AnnotationDryRun] = string(b)
	}
	if len(rec.originals) > 0 {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[v1alpha1.LabelRewritten] = "true"
	} else {
		delete(pod.Labels, v1alpha1.LabelRewritten)
	}
	return nil
}

// encodeEntries is json.Marshal of es as a map, byte for byte, written directly when every
// container and value is printable ASCII that json.Marshal copies as it is (no quote,
// backslash or HTML character to escape): the common case, at a fraction of the reflection's
// cost.
func encodeEntries(es entries) (string, error) {
	size, ok := plainSize(es)
	if !ok {
		m := make(map[string]string, len(es))
		for _, e := range es {
			m[e.container] = e.value
		}
		b, err := json.Marshal(m)
		return string(b), err
	}
	var b strings.Builder
	b.Grow(size)
	writeEntries(&b, es)
	return b.String(), nil
}

// plainSize is the size of es written directly; false when json.Marshal must write it.
func plainSize(es entries) (int, bool) {
	size := 2
	for _, e := range es {
		if !plainJSON(e.container) || !plainJSON(e.value) {
			return 0, false
		}
		size += len(e.container) + len(e.value) + 6
	}
	return size, true
}

// writeEntries writes es, plain (plainSize), as a JSON object.
func writeEntries(b *strings.Builder, es entries) {
	b.WriteByte('{')
	for i, e := range es {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(e.container)
		b.WriteString(`":"`)
		b.WriteString(e.value)
		b.WriteByte('"')
	}
	b.WriteByte('}')
}

// plainJSON reports whether json.Marshal writes s between quotes unchanged.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// readRawMap decodes kuik.enix.io/dry-run the way readMap decodes the others, nil when absent
// (most pods: no allocation).
func readRawMap(annotations map[string]string, key string) map[string]json.RawMessage {
	v, ok := annotations[key]
	if !ok || v == "" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil
	}
	return m
}

// readMap decodes one of kuik's JSON map annotations; nil when there is none (most pods: no
// allocation). kuik never writes a malformed one, so a malformed value (or JSON null) is
// someone else's and reads as empty: the record is dropped and rewritten rather than shielding
// the pod's other records from verification.
func readMap(annotations map[string]string, key string) map[string]string {
	v, ok := annotations[key]
	if !ok || v == "" {
		return nil
	}
	if m, ok := decodePlainMap(v); ok {
		return m
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil
	}
	return m
}

// decodePlainMap is json.Unmarshal of v into a map[string]string when v is written as
// encodeEntries writes it directly ({"k":"v",...}, no space, no escape, printable ASCII only):
// the records kuik wrote, decoded without reflection and without copying a string. false for
// anything else, which json.Unmarshal decodes.
func decodePlainMap(v string) (map[string]string, bool) {
	m := make(map[string]string, strings.Count(v, `","`)+1)
	ok := walkPlainMap(v, func(k, val string) { m[k] = val }) // the last of duplicate keys wins, as with json.Unmarshal
	return m, ok
}

// decodePlainEntries is decodePlainMap as entries, when the keys come in order, each once (as
// kuik writes them); false otherwise.
func decodePlainEntries(v string) (entries, bool) {
	es := make(entries, 0, strings.Count(v, `","`)+1)
	sorted := true
	ok := walkPlainMap(v, func(k, val string) {
		if n := len(es); n > 0 && es[n-1].container >= k {
			sorted = false
		}
		es = append(es, entry{k, val})
	})
	return es, ok && sorted
}

// walkPlainMap calls member for each member of v, in order, when v is written as encodeEntries
// writes it directly; false when it is not.
func walkPlainMap(v string, member func(k, v string)) bool {
	if len(v) < 2 || v[0] != '{' || v[len(v)-1] != '}' {
		return false
	}
	body := v[1 : len(v)-1]
	if body == "" {
		return true
	}
	for {
		k, rest, ok := plainString(body)
		if !ok || rest == "" || rest[0] != ':' {
			return false
		}
		val, rest, ok := plainString(rest[1:])
		if !ok {
			return false
		}
		member(k, val)
		if rest == "" {
			return true
		}
		if rest[0] != ',' {
			return false
		}
		body = rest[1:]
	}
}

// plainString cuts the JSON string at the start of s when nothing in it is escaped and it is
// printable ASCII: its value and what follows it.
func plainString(s string) (value, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[1:i], s[i+1:], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", "", false
		}
	}
	return "", "", false
}
