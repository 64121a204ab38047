package credentials

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

var (
	// ErrNotDockerConfig: the Secret is not of type kubernetes.io/dockerconfigjson (or
	// kubernetes.io/dockercfg), or its data key is missing or empty.
	ErrNotDockerConfig = errors.New("not a docker config secret")
	// ErrInvalidDockerConfig: the docker config does not parse, so the kubelet refuses it whole.
	ErrInvalidDockerConfig = errors.New("invalid docker config")
	// ErrNoCredentialForPath: no auths key matches the path by the kubelet's rules, or none of
	// the matching entries gives a credential (undecodable or empty).
	ErrNoCredentialForPath = errors.New("no credential for path")
	// ErrUndecodableEntry: an auths entry the kubelet cannot decode; see
	// [DockerConfig.Undecodable].
	ErrUndecodableEntry = errors.New("undecodable auths entry")
	// ErrInvalidPath: the path given to [DockerConfig.Lookup] or [NormalizePath] is not a
	// registry path. Lookup's errors for such a path wrap ErrNoCredentialForPath too.
	ErrInvalidPath = errors.New("invalid registry path")
	// ErrUnencodableEntry: [Encode] was given an entry the kubelet would not read back as given.
	ErrUnencodableEntry = errors.New("entry cannot be encoded")
)

// AuthEntry is one credential as the kubelet reads it: only username, password and auth count,
// auth being decoded into Username and Password.
type AuthEntry struct {
	Username string
	Password string
}

// UndecodableEntry is an auths entry that the kubelet cannot decode. Err wraps
// ErrUndecodableEntry.
type UndecodableEntry struct {
	Key string
	Err error
}

// DockerConfig is a parsed pull Secret: auths key -> entry. Build it with [Parse] or
// [ParseSecret]; the zero value holds no entry.
type DockerConfig struct {
	// entries holds every decodable entry (empty ones included, since they still match), in the
	// order the kubelet tries them: kubelet key descending, then auths key ascending.
	entries []entry
	// undecodable holds the entries kept aside, sorted by key.
	undecodable []UndecodableEntry
}

// entry is one decodable auths entry with its key as the kubelet's keyring indexes it.
type entry struct {
	key        string // the auths key as written
	kubeletKey string // host + effective path, see kubeletKey
	glob       *hostPath
	auth       AuthEntry
}

// usable reports whether the entry gives a credential. The kubelet passes an entry with an
// empty username to the runtime, which then pulls anonymously (containerd ignores a password
// without a username), so such an entry is no credential to copy.
func (e *entry) usable() bool { return e.auth.Username != "" }

// Entries returns the entries that give a credential (decodable, non-empty username), by auths
// key as written. The map is a copy.
func (c *DockerConfig) Entries() map[string]AuthEntry {
	out := make(map[string]AuthEntry, len(c.entries))
	for i := range c.entries {
		if c.entries[i].usable() {
			out[c.entries[i].key] = c.entries[i].auth
		}
	}
	return out
}

// Undecodable returns the entries the kubelet cannot decode, sorted by key. An entry hidden by a
// later duplicate of its key in the JSON is listed as well, since the kubelet decodes both.
func (c *DockerConfig) Undecodable() []UndecodableEntry {
	return slices.Clone(c.undecodable)
}

// ParseSecret parses a pull Secret of type kubernetes.io/dockerconfigjson (data key
// .dockerconfigjson, {"auths":{...}}) or kubernetes.io/dockercfg (data key .dockercfg, the bare
// auths map), the two types the kubelet reads. Errors wrap ErrNotDockerConfig or
// ErrInvalidDockerConfig.
func ParseSecret(s *corev1.Secret) (*DockerConfig, error) {
	if s == nil {
		return nil, fmt.Errorf("nil secret: %w", ErrNotDockerConfig)
	}
	var dataKey string
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		dataKey = corev1.DockerConfigJsonKey
	case corev1.SecretTypeDockercfg:
		dataKey = corev1.DockerConfigKey
	default:
		return nil, fmt.Errorf("secret %s/%s has type %q: %w", s.Namespace, s.Name, s.Type, ErrNotDockerConfig)
	}
	// The kubelet skips a Secret whose data key is missing or empty (pkg/credentialprovider/
	// secrets/secrets.go): it gives no credential.
	data := s.Data[dataKey]
	if len(data) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no %q data: %w", s.Namespace, s.Name, dataKey, ErrNotDockerConfig)
	}
	var (
		c   *DockerConfig
		err error
	)
	if s.Type == corev1.SecretTypeDockercfg {
		c, err = parseDockercfg(data)
	} else {
		c, err = Parse(data)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return c, nil
}

// kubeletDockerConfigJSON has the shape the kubelet unmarshals a .dockerconfigjson into
// (DockerConfigJSON in pkg/credentialprovider/config.go): a document the kubelet refuses, such
// as HttpHeaders that are not a string map, is refused here too.
type kubeletDockerConfigJSON struct {
	Auths       map[string]json.RawMessage `json:"auths"`
	HTTPHeaders map[string]string          `json:"HttpHeaders,omitempty"`
}

// Parse parses the content of a .dockerconfigjson: {"auths":{key:entry,...}}. Errors wrap
// ErrInvalidDockerConfig; undecodable entries are no error, see [DockerConfig.Undecodable].
func Parse(dockerConfigJSON []byte) (*DockerConfig, error) {
	var doc kubeletDockerConfigJSON
	if err := json.Unmarshal(dockerConfigJSON, &doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDockerConfig, err)
	}
	// Walk the document again to see every auths entry, duplicates included: encoding/json keeps
	// the last value of a duplicated key, but the kubelet decodes (and fails on) each of them.
	// Like encoding/json, it matches the "auths" field case-insensitively and merges repeats.
	var raw []rawEntry
	err := walkObject(dockerConfigJSON, func(key string, value json.RawMessage) error {
		if !strings.EqualFold(key, "auths") {
			return nil
		}
		return walkObject(value, func(key string, value json.RawMessage) error {
			raw = append(raw, rawEntry{key: key, value: value})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDockerConfig, err)
	}
	return build(raw), nil
}

// parseDockercfg parses the content of a legacy .dockercfg: the bare auths map.
func parseDockercfg(dockercfg []byte) (*DockerConfig, error) {
	var auths map[string]json.RawMessage
	if err := json.Unmarshal(dockercfg, &auths); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDockerConfig, err)
	}
	var raw []rawEntry
	err := walkObject(dockercfg, func(key string, value json.RawMessage) error {
		raw = append(raw, rawEntry{key: key, value: value})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidDockerConfig, err)
	}
	return build(raw), nil
}

type rawEntry struct {
	key   string
	value json.RawMessage
}

// build decodes raw entries, in document order, into a DockerConfig. The last value of a
// duplicated key is the entry; an earlier undecodable value is still reported.
func build(raw []rawEntry) *DockerConfig {
	last := make(map[string]int, len(raw))
	for i, r := range raw {
		last[r.key] = i
	}
	c := &DockerConfig{}
	for i, r := range raw {
		auth, err := decodeEntry(r.value)
		if err != nil {
			if last[r.key] != i {
				err = fmt.Errorf("%w (hidden by a later duplicate of the key)", err)
			}
			c.undecodable = append(c.undecodable, UndecodableEntry{Key: r.key, Err: err})
			continue
		}
		if last[r.key] != i {
			continue
		}
		kk, glob := kubeletKey(r.key)
		c.entries = append(c.entries, entry{key: r.key, kubeletKey: kk, glob: glob, auth: auth})
	}
	sortEntries(c.entries)
	slices.SortStableFunc(c.undecodable, func(a, b UndecodableEntry) int {
		return strings.Compare(a.Key, b.Key)
	})
	return c
}

// NewDockerConfig builds a DockerConfig from decoded entries, as the kubelet's keyring adds a
// credential provider's auth map (BasicDockerKeyring.Add): [DockerConfig.Lookup] then picks the
// most specific key matching a path. Nothing is undecodable; an entry with an empty username
// still matches but gives no credential.
func NewDockerConfig(auths map[string]AuthEntry) *DockerConfig {
	c := &DockerConfig{entries: make([]entry, 0, len(auths))}
	for key, auth := range auths {
		kk, glob := kubeletKey(key)
		c.entries = append(c.entries, entry{key: key, kubeletKey: kk, glob: glob, auth: auth})
	}
	sortEntries(c.entries)
	return c
}

// sortEntries puts entries in the order the kubelet's keyring tries them.
func sortEntries(entries []entry) {
	// The kubelet's keyring tries keys in reverse lexicographic order, so that a longer path
	// comes before its prefix (BasicDockerKeyring.Add in keyring.go). Keys that read the same
	// (quay.io and https://quay.io) come out of a Go map there, in no set order; here the auths
	// key as written breaks the tie.
	slices.SortStableFunc(entries, func(a, b entry) int {
		if a.kubeletKey != b.kubeletKey {
			return strings.Compare(b.kubeletKey, a.kubeletKey)
		}
		return strings.Compare(a.key, b.key)
	})
}

// walkObject calls fn for each member of the JSON object data, in order, duplicates included.
// A JSON null is an empty object, as encoding/json reads it into a map.
func walkObject(data []byte, fn func(key string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("reading object: %w", err)
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected a JSON object, got %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("reading object key: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("expected an object key, got %v", tok)
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return fmt.Errorf("reading value of %q: %w", key, err)
		}
		if err := fn(key, value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("reading object end: %w", err)
	}
	return nil
}

// kubeletEntry has the fields the kubelet unmarshals an auths entry into
// (dockerConfigEntryWithAuth in pkg/credentialprovider/config.go). Email is read only because
// a non-string email fails the kubelet's decoding.
type kubeletEntry struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Email    string `json:"email,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// decodeEntry decodes one auths entry as the kubelet's DockerConfigEntry.UnmarshalJSON does: a
// non-empty auth replaces username and password. Errors wrap ErrUndecodableEntry.
func decodeEntry(value json.RawMessage) (AuthEntry, error) {
	var e kubeletEntry
	if err := json.Unmarshal(value, &e); err != nil {
		return AuthEntry{}, fmt.Errorf("%w: %w", ErrUndecodableEntry, err)
	}
	if e.Auth == "" {
		return AuthEntry{Username: e.Username, Password: e.Password}, nil
	}
	return decodeAuthField(e.Auth)
}

// decodeAuthField decodes an auth field, base64(user:password), as the kubelet's
// decodeDockerConfigFieldAuth does: padded base64 when the trimmed field ends with '=',
// unpadded otherwise, and the user ends at the first ':'.
func decodeAuthField(field string) (AuthEntry, error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		enc = base64.StdEncoding
	}
	decoded, err := enc.DecodeString(field)
	if err != nil {
		return AuthEntry{}, fmt.Errorf("%w: auth is not base64: %w", ErrUndecodableEntry, err)
	}
	user, password, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return AuthEntry{}, fmt.Errorf("%w: auth is not base64(user:password)", ErrUndecodableEntry)
	}
	return AuthEntry{Username: user, Password: password}, nil
}

// encodedEntry is one entry as Encode writes it, fields in this order.
type encodedEntry struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth,omitempty"`
}

// Encode writes a .dockerconfigjson {"auths":{key:{"username":..,"password":..,"auth":..}}},
// auth being base64(username:password), keys sorted: the same map always gives the same bytes,
// and an empty map gives {"auths":{}}. Every entry written decodes to what was given.
//
// A username holding ':' cannot travel in auth (the kubelet splits auth at the first ':'), so
// such an entry is written with username and password only, which the kubelet then reads as
// they are. Errors wrap ErrUnencodableEntry: a key that is not UTF-8, an empty username, or a
// username holding ':' with a username or password that is not UTF-8.
func Encode(auths map[string]AuthEntry) ([]byte, error) {
	doc := struct {
		Auths map[string]encodedEntry `json:"auths"`
	}{Auths: make(map[string]encodedEntry, len(auths))}
	for key, a := range auths {
		if !utf8.ValidString(key) {
			return nil, fmt.Errorf("%w: auths key %q is not UTF-8", ErrUnencodableEntry, key)
		}
		if a.Username == "" {
			return nil, fmt.Errorf("%w: auths key %q has an empty username", ErrUnencodableEntry, key)
		}
		e := encodedEntry{Username: a.Username, Password: a.Password}
		if !strings.Contains(a.Username, ":") {
			e.Auth = base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))
		} else if !utf8.ValidString(a.Username) || !utf8.ValidString(a.Password) {
			return nil, fmt.Errorf("%w: auths key %q has a username with ':' and a username or password that is not UTF-8", ErrUnencodableEntry, key)
		}
		doc.Auths[key] = e
	}
	// encoding/json writes map keys sorted and struct fields in order: deterministic bytes.
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding docker config: %w", err)
	}
	return out, nil
}
