package webhook

import (
	"bytes"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// podFields is what kuik reads of a pod: its namespace, labels and annotations, the name and
// image of every container, and its image pull secrets. Each field has the name, tag and Go type
// of the pod's own, so encoding/json decodes it exactly as json.Unmarshal of a whole corev1.Pod
// does (case-insensitive names, the last of duplicate keys, null and absent maps kept apart);
// the fields kuik does not read are only checked for JSON syntax. Decoding the whole pod was
// most of an admission's CPU: resources, environment and probes kuik never looks at.
type podFields struct {
	Metadata struct {
		Namespace   string            `json:"namespace,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata,omitempty"`
	Spec struct {
		InitContainers      []containerFields             `json:"initContainers,omitempty"`
		Containers          []containerFields             `json:"containers"`
		EphemeralContainers []containerFields             `json:"ephemeralContainers,omitempty"`
		ImagePullSecrets    []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	} `json:"spec,omitempty"`
}

// containerFields is what kuik reads of a container, an init container or an ephemeral one
// (whose name and image corev1.EphemeralContainerCommon inlines).
type containerFields struct {
	Name  string `json:"name"`
	Image string `json:"image,omitempty"`
}

// decodePod decodes into pod, which it expects empty, what kuik reads of the pod in raw, and
// only that. Its error is json.Unmarshal's: raw is not JSON, or a field kuik reads has the
// wrong type. A field kuik does not read may hold anything: the API server sends its own
// serialization of a pod, which always decodes.
func decodePod(raw []byte, pod *corev1.Pod) error {
	var f podFields
	if !decodeFields(raw, &f) {
		var slow podFields // its own variable: f stays on the stack
		if err := json.Unmarshal(raw, &slow); err != nil {
			return err
		}
		f = slow
	}
	pod.Namespace = f.Metadata.Namespace
	pod.Labels = f.Metadata.Labels
	pod.Annotations = f.Metadata.Annotations
	pod.Spec.InitContainers = containers(f.Spec.InitContainers)
	pod.Spec.Containers = containers(f.Spec.Containers)
	if f.Spec.EphemeralContainers != nil {
		pod.Spec.EphemeralContainers = make([]corev1.EphemeralContainer, len(f.Spec.EphemeralContainers))
		for i, c := range f.Spec.EphemeralContainers {
			pod.Spec.EphemeralContainers[i].Name, pod.Spec.EphemeralContainers[i].Image = c.Name, c.Image
		}
	}
	pod.Spec.ImagePullSecrets = f.Spec.ImagePullSecrets
	return nil
}

// containers keeps nil apart from empty, as json.Unmarshal does.
func containers(cs []containerFields) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i].Name, out[i].Image = c.Name, c.Image
	}
	return out
}

// decodeFields is json.Unmarshal(raw, f) for raw written as the API server writes a pod: JSON
// (json.Valid), every field f holds at most once, under its own name, with a value of its type
// (no null). It walks raw once without reflection, checking the syntax of what it skips. false
// when raw is not JSON or is written otherwise (a field twice, or under another case, or null,
// or of another type): json.Unmarshal then decides, exactly, at its own cost.
func decodeFields(raw []byte, f *podFields) bool {
	w := walker{b: raw}
	return w.whole(func() bool {
		return w.object(func(key []byte) (bool, bool) {
			switch string(key) {
			case "metadata":
				return true, w.object(func(key []byte) (bool, bool) {
					switch string(key) {
					case "namespace":
						return true, w.strTo(&f.Metadata.Namespace)
					case "labels":
						return true, w.stringMap(&f.Metadata.Labels)
					case "annotations":
						return true, w.stringMap(&f.Metadata.Annotations)
					}
					return false, !foldsTo(key, "namespace", "labels", "annotations")
				})
			case "spec":
				return true, w.object(func(key []byte) (bool, bool) {
					switch string(key) {
					case "initContainers":
						return true, w.containers(&f.Spec.InitContainers)
					case "containers":
						return true, w.containers(&f.Spec.Containers)
					case "ephemeralContainers":
						return true, w.containers(&f.Spec.EphemeralContainers)
					case "imagePullSecrets":
						return true, w.pullSecrets(&f.Spec.ImagePullSecrets)
					}
					return false, !foldsTo(key, "initContainers", "containers", "ephemeralContainers", "imagePullSecrets")
				})
			}
			return false, !foldsTo(key, "metadata", "spec")
		})
	})
}

// foldsTo reports whether encoding/json would take key for one of names although it is none
// of them: it matches names case-insensitively (bytes.EqualFold).
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// walker reads JSON from b at i, and checks its syntax as json.Valid does, of the values it
// skips too: what it reads of b is what json.Unmarshal would, when b is valid JSON, and it
// fails when b is not. depth is the arrays and objects it is in.
type walker struct {
	b     []byte
	i     int
	depth int
}

// maxDepth is the deepest nesting encoding/json accepts.
const maxDepth = 10000

// whole reads b with value, which must leave nothing after it but space.
func (w *walker) whole(value func() bool) bool {
	if !value() {
		return false
	}
	w.space()
	return w.i == len(w.b)
}

func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// at is the next byte after space, 0 at the end.
func (w *walker) at() byte {
	w.space()
	if w.i >= len(w.b) {
		return 0
	}
	return w.b[w.i]
}

// enter and leave count the arrays and objects the walker is in.
func (w *walker) enter() bool {
	w.depth++
	return w.depth <= maxDepth
}

func (w *walker) leave() { w.depth-- }

// next reads what follows a member or an element: a comma (true, more follows) or close (false,
// done, ok); anything else fails (ok false).
func (w *walker) next(close byte) (more, ok bool) {
	switch w.at() {
	case ',':
		w.i++
		return true, true
	case close:
		w.i++
		return false, true
	}
	return false, false
}

// object reads an object, calling member for each key with the walker at its value: member
// reads the value and reports whether it did (else the value is skipped) and whether to go on.
// Each key member reads must come once: a second one stops the walk.
func (w *walker) object(member func(key []byte) (read, ok bool)) bool {
	if w.at() != '{' || !w.enter() {
		return false
	}
	defer w.leave()
	w.i++
	if w.at() == '}' {
		w.i++
		return true
	}
	var seen [10][]byte // the most keys read of an object: a review's request (reviewFields)
	n := 0
	for {
		key, ok := w.key()
		if !ok || w.at() != ':' {
			return false
		}
		w.i++
		w.space()
		start := w.i
		read, ok := member(key)
		switch {
		case !ok:
			return false
		case !read:
			w.i = start
			if !w.skip() {
				return false
			}
		default:
			for _, k := range seen[:n] {
				if bytes.Equal(k, key) {
					return false
				}
			}
			if n == len(seen) {
				return false
			}
			seen[n] = key
			n++
		}
		more, ok := w.next('}')
		if !more {
			return ok
		}
	}
}

// array reads an array, calling elem with the walker at each element.
func (w *walker) array(elem func() bool) bool {
	if w.at() != '[' || !w.enter() {
		return false
	}
	defer w.leave()
	w.i++
	if w.at() == ']' {
		w.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		more, ok := w.next(']')
		if !more {
			return ok
		}
	}
}

// str reads a string: copied when written plainly (printable ASCII, no escape), else decoded
// by json.Unmarshal (escapes, and UTF-8, invalid bytes included).
func (w *walker) str() (string, bool) {
	if w.at() != '"' {
		return "", false
	}
	start, plain := w.i, true
	w.i++
	for w.i < len(w.b) {
		switch c := w.b[w.i]; {
		case c == '"':
			w.i++
			if plain {
				return string(w.b[start+1 : w.i-1]), true
			}
			var s string
			err := json.Unmarshal(w.b[start:w.i], &s)
			return s, err == nil
		case c == '\\':
			plain = false
			w.i += 2
		case c < 0x20:
			return "", false
		case c >= 0x80:
			plain = false
			w.i++
		default:
			w.i++
		}
	}
	return "", false
}

// key reads an object's key: in place when written plainly, else decoded as str does.
func (w *walker) key() ([]byte, bool) {
	if w.at() != '"' {
		return nil, false
	}
	start := w.i + 1
	for j := start; j < len(w.b); j++ {
		switch c := w.b[j]; {
		case c == '"':
			w.i = j + 1
			return w.b[start:j], true
		case c == '\\' || c >= 0x80:
			s, ok := w.str()
			return []byte(s), ok
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// strings reads an object, and of it the strings named names, into dsts (one for each name).
func (w *walker) strings(names []string, dsts ...*string) bool {
	return w.object(func(key []byte) (bool, bool) {
		for i, n := range names {
			if string(key) == n {
				return true, w.strTo(dsts[i])
			}
		}
		return false, !foldsTo(key, names...)
	})
}

// strTo reads a string into s.
func (w *walker) strTo(s *string) bool {
	v, ok := w.str()
	*s = v
	return ok
}

// skip skips a value, checking its syntax. It does not recurse: open holds the brackets of
// the arrays and objects it is in.
func (w *walker) skip() bool {
	var local [32]byte
	open := local[:0]
values:
	for {
		switch c := w.at(); c {
		case '{', '[':
			if w.depth+len(open)+1 > maxDepth {
				return false
			}
			w.i++
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			if w.at() == end {
				w.i++
				break // an empty one: a whole value
			}
			open = append(open, end)
			if c == '{' && !w.skipKey() {
				return false
			}
			continue
		case '"':
			if !w.skipString() {
				return false
			}
		case 't':
			if !w.literal("true") {
				return false
			}
		case 'f':
			if !w.literal("false") {
				return false
			}
		case 'n':
			if !w.literal("null") {
				return false
			}
		default:
			if !w.number() {
				return false
			}
		}
		// A value ends: close what it ends, or go on to the next value.
		for len(open) > 0 {
			end := open[len(open)-1]
			more, ok := w.next(end)
			switch {
			case !ok:
				return false
			case more:
				if end == '}' && !w.skipKey() {
					return false
				}
				continue values
			}
			open = open[:len(open)-1]
		}
		return true
	}
}

// raw reads an object as its bytes, into dst (which then shares b's), or null as nil (as
// runtime.RawExtension does).
func (w *walker) raw(dst *[]byte) bool {
	switch w.at() {
	case 'n':
		*dst = nil
		return w.literal("null")
	case '{':
		start := w.i
		if !w.skip() {
			return false
		}
		*dst = w.b[start:w.i]
		return true
	}
	return false
}

// skipKey skips a key and its colon.
func (w *walker) skipKey() bool {
	if w.at() != '"' || !w.skipString() || w.at() != ':' {
		return false
	}
	w.i++
	return true
}

// skipString skips the string at i, checking its escapes and that it holds no control byte.
func (w *walker) skipString() bool {
	w.i++
	for w.i < len(w.b) {
		switch c := w.b[w.i]; {
		case c == '"':
			w.i++
			return true
		case c == '\\':
			if w.i+1 >= len(w.b) {
				return false
			}
			switch w.b[w.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				w.i += 2
			case 'u':
				if w.i+6 > len(w.b) || !isHex(w.b[w.i+2]) || !isHex(w.b[w.i+3]) || !isHex(w.b[w.i+4]) || !isHex(w.b[w.i+5]) {
					return false
				}
				w.i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			w.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// literal skips s (true, false or null).
func (w *walker) literal(s string) bool {
	if !bytes.HasPrefix(w.b[w.i:], []byte(s)) {
		return false
	}
	w.i += len(s)
	return true
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	b, i := w.b, w.i
	digits := func() bool {
		j := i
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	w.i = i
	return true
}

// stringMap reads an object of strings into a new map.
func (w *walker) stringMap(m *map[string]string) bool {
	*m = map[string]string{}
	if w.at() != '{' || !w.enter() {
		return false
	}
	defer w.leave()
	w.i++
	if w.at() == '}' {
		w.i++
		return true
	}
	for {
		k, ok := w.str()
		if !ok || w.at() != ':' {
			return false
		}
		w.i++
		v, ok := w.str()
		if !ok {
			return false
		}
		(*m)[k] = v // the last of duplicate keys wins, as with json.Unmarshal
		more, ok := w.next('}')
		if !more {
			return ok
		}
	}
}

func (w *walker) containers(cs *[]containerFields) bool {
	*cs = []containerFields{}
	return w.array(func() bool {
		var c containerFields
		ok := w.object(func(key []byte) (bool, bool) {
			switch string(key) {
			case "name":
				return true, w.strTo(&c.Name)
			case "image":
				return true, w.strTo(&c.Image)
			}
			return false, !foldsTo(key, "name", "image")
		})
		*cs = append(*cs, c)
		return ok
	})
}

func (w *walker) pullSecrets(rs *[]corev1.LocalObjectReference) bool {
	*rs = []corev1.LocalObjectReference{}
	return w.array(func() bool {
		var r corev1.LocalObjectReference
		ok := w.object(func(key []byte) (bool, bool) {
			if string(key) == "name" {
				return true, w.strTo(&r.Name)
			}
			return false, !foldsTo(key, "name")
		})
		*rs = append(*rs, r)
		return ok
	})
}
