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
	if !json.Valid(raw) || !decodeFields(raw, &f) {
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

// decodeFields is json.Unmarshal(raw, f) for valid JSON raw written as the API server writes
// a pod: every field f holds at most once, under its own name, with a value of its type (no
// null). It walks raw once without reflection, skipping what f does not hold. false when raw
// is written otherwise (a field twice, or under another case, or null, or of another type):
// json.Unmarshal then decides, exactly, at its own cost.
func decodeFields(raw []byte, f *podFields) bool {
	w := walker{b: raw}
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

// walker reads valid JSON (json.Valid) from b at i.
type walker struct {
	b []byte
	i int
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

// object reads an object, calling member for each key with the walker at its value: member
// reads the value and reports whether it did (else the value is skipped) and whether to go on.
// Each key member reads must come once: a second one stops the walk.
func (w *walker) object(member func(key []byte) (read, ok bool)) bool {
	if w.at() != '{' {
		return false
	}
	w.i++
	var seen [4][]byte // the most keys an object of podFields has
	n := 0
	for {
		switch w.at() {
		case '}':
			w.i++
			return true
		case ',':
			w.i++
			continue
		}
		key, ok := w.key()
		if !ok || w.at() != ':' {
			return false
		}
		w.i++
		w.space()
		start := w.i
		read, ok := member(key)
		if !ok {
			return false
		}
		if !read {
			w.i = start
			w.skip()
			continue
		}
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
}

// array reads an array, calling elem with the walker at each element.
func (w *walker) array(elem func() bool) bool {
	if w.at() != '[' {
		return false
	}
	w.i++
	for {
		switch w.at() {
		case ']':
			w.i++
			return true
		case ',':
			w.i++
			continue
		}
		if !elem() {
			return false
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
		}
	}
	return nil, false
}

// strTo reads a string into s.
func (w *walker) strTo(s *string) bool {
	v, ok := w.str()
	*s = v
	return ok
}

// skip skips a value.
func (w *walker) skip() {
	switch w.at() {
	case '"':
		w.i++
		for w.i < len(w.b) && w.b[w.i] != '"' {
			if w.b[w.i] == '\\' {
				w.i++
			}
			w.i++
		}
		w.i++
	case '{', '[':
		depth := 0
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case '"':
				w.skip()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				return
			}
		}
	default: // a number, true, false or null
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			w.i++
		}
	}
}

// stringMap reads an object of strings into a new map.
func (w *walker) stringMap(m *map[string]string) bool {
	*m = map[string]string{}
	if w.at() != '{' {
		return false
	}
	w.i++
	for {
		switch w.at() {
		case '}':
			w.i++
			return true
		case ',':
			w.i++
			continue
		}
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
