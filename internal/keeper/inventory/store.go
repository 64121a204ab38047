package inventory

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/keep"
)

const (
	// HeadName is the head ConfigMap; shards are named HeadName-<generation>-<id>-<index>.
	HeadName = "kuik-keeper-inventory"
	// LabelManagedBy / ManagedBy label every ConfigMap of the inventory.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "kuik-keeper"
	// LabelInventory is "head" or "shard".
	LabelInventory = "kuik.enix.io/inventory"
	// LabelGeneration is a shard's generation.
	LabelGeneration = "kuik.enix.io/inventory-generation"

	// MaxTags bounds the inventory: a Save of more is refused.
	MaxTags = 200_000
	// MaxShardBytes bounds a shard's compressed data (the object limit is 1 MiB).
	MaxShardBytes = 512 << 10

	roleHead  = "head"
	roleShard = "shard"
	headKey   = "head.json"
	shardKey  = "tags.json.gz"
	version   = 1
	// maxShards bounds what Load fetches: MaxTags of large tags fit.
	maxShards = 256
	// maxShardJSON bounds a shard once decompressed.
	maxShardJSON = 32 << 20
	// chunkJSON is the uncompressed size a shard starts from before it is halved to fit.
	chunkJSON = 2 << 20
)

var (
	// ErrConflict: another writer changed the inventory since this Store last read or wrote
	// it. Load again (a deposed leader should stop instead).
	ErrConflict = errors.New("the inventory was changed by another writer")
	// ErrCorrupt: the saved inventory cannot be read whole (a shard missing or altered).
	ErrCorrupt = errors.New("the saved inventory is unreadable")
	// ErrTooLarge: the inventory exceeds MaxTags, or a tag exceeds a shard.
	ErrTooLarge = errors.New("the inventory is too large")
	// ErrNotLoaded: Save before Load; a Store replaces only an inventory it has read.
	ErrNotLoaded = errors.New("save before load")
)

// head is the head ConfigMap's document.
type head struct {
	Version    int       `json:"version"`
	Generation int64     `json:"generation"`
	LastSweep  time.Time `json:"lastSweep,omitzero"`
	Shards     []shard   `json:"shards,omitempty"`
}

// shard is the head's record of one shard.
type shard struct {
	Name   string `json:"name"`
	Tags   int    `json:"tags"`
	SHA256 string `json:"sha256"`
}

type shardDoc struct {
	Tags []keep.Tag `json:"tags"`
}

// Store is the inventory in the ConfigMaps of one namespace; it implements keeper.Store.
type Store struct {
	c         client.Client
	namespace string

	mu     sync.Mutex
	loaded bool
	// rv is the head's resourceVersion when last read or written, "" when there was none.
	rv   string
	head head
}

// NewStore is the inventory in namespace; c must read the API server directly, not a cache.
func NewStore(c client.Client, namespace string) *Store {
	return &Store{c: c, namespace: namespace}
}

// Load reads the saved inventory and remembers the head's resourceVersion for the next Save.
// No head is an empty inventory; an unreadable one is an error wrapping ErrCorrupt, and Save is
// refused until a Load succeeds (deleting the head resets the inventory, leaking its tags).
func (s *Store) Load(ctx context.Context) (keep.Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Until a Load succeeds, what is saved is unknown: Save is refused.
	s.loaded = false
	var cm corev1.ConfigMap
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: HeadName}, &cm)
	if apierrors.IsNotFound(err) {
		s.loaded, s.rv, s.head = true, "", head{}
		return keep.Inventory{}, nil
	}
	if err != nil {
		return keep.Inventory{}, fmt.Errorf("reading the inventory head %s/%s: %w", s.namespace, HeadName, err)
	}
	h, err := parseHead(&cm)
	if err != nil {
		return keep.Inventory{}, fmt.Errorf("inventory head %s/%s: %w: %w", s.namespace, HeadName, ErrCorrupt, err)
	}
	inv := keep.Inventory{LastSweep: h.LastSweep}
	for _, sh := range h.Shards {
		tags, err := s.readShard(ctx, sh)
		if err != nil {
			return keep.Inventory{}, err
		}
		inv.Tags = append(inv.Tags, tags...)
	}
	s.loaded, s.rv, s.head = true, cm.ResourceVersion, h
	return inv, nil
}

func parseHead(cm *corev1.ConfigMap) (head, error) {
	raw, ok := cm.Data[headKey]
	if !ok {
		return head{}, fmt.Errorf("no %s", headKey)
	}
	var h head
	if err := json.Unmarshal([]byte(raw), &h); err != nil {
		return head{}, err
	}
	if h.Version != version {
		return head{}, fmt.Errorf("format version %d, this keeper reads %d", h.Version, version)
	}
	if len(h.Shards) > maxShards {
		return head{}, fmt.Errorf("%d shards, at most %d", len(h.Shards), maxShards)
	}
	total := 0
	for _, sh := range h.Shards {
		if sh.Tags < 0 {
			return head{}, fmt.Errorf("shard %s: %d tags", sh.Name, sh.Tags)
		}
		total += sh.Tags
	}
	if total > MaxTags {
		return head{}, fmt.Errorf("%d tags, at most %d", total, MaxTags)
	}
	return h, nil
}

// readShard reads one shard and checks it is the one the head names.
func (s *Store) readShard(ctx context.Context, sh shard) ([]keep.Tag, error) {
	var cm corev1.ConfigMap
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: sh.Name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("inventory shard %s/%s is missing: %w", s.namespace, sh.Name, ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("reading inventory shard %s/%s: %w", s.namespace, sh.Name, err)
	}
	tags, err := decodeShard(cm.BinaryData[shardKey], sh)
	if err != nil {
		return nil, fmt.Errorf("inventory shard %s/%s: %w: %w", s.namespace, sh.Name, ErrCorrupt, err)
	}
	return tags, nil
}

func decodeShard(gz []byte, sh shard) ([]keep.Tag, error) {
	sum := sha256.Sum256(gz)
	if hex.EncodeToString(sum[:]) != sh.SHA256 {
		return nil, errors.New("checksum differs from the head's")
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxShardJSON+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxShardJSON {
		return nil, fmt.Errorf("over %d bytes decompressed", maxShardJSON)
	}
	var doc shardDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	if len(doc.Tags) != sh.Tags {
		return nil, fmt.Errorf("%d tags, the head says %d", len(doc.Tags), sh.Tags)
	}
	return doc.Tags, nil
}

// Save replaces the saved inventory: new shards first, then the head, then the shards the head
// no longer names. It fails with ErrConflict when the head changed since the last Load or Save,
// with ErrTooLarge over MaxTags, and with ErrNotLoaded before any Load.
func (s *Store) Save(ctx context.Context, inv keep.Inventory) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return ErrNotLoaded
	}
	if len(inv.Tags) > MaxTags {
		return fmt.Errorf("%w: %d tags, at most %d", ErrTooLarge, len(inv.Tags), MaxTags)
	}
	chunks, err := encodeShards(inv.Tags)
	if err != nil {
		return err
	}
	if len(chunks) > maxShards {
		return fmt.Errorf("%w: %d shards, at most %d", ErrTooLarge, len(chunks), maxShards)
	}

	id, err := randomID()
	if err != nil {
		return err
	}
	next := head{Version: version, Generation: s.head.Generation + 1, LastSweep: inv.LastSweep}
	created := make([]string, 0, len(chunks))
	for i, ch := range chunks {
		name := fmt.Sprintf("%s-%d-%s-%d", HeadName, next.Generation, id, i)
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: name, Labels: map[string]string{
				LabelManagedBy:  ManagedBy,
				LabelInventory:  roleShard,
				LabelGeneration: strconv.FormatInt(next.Generation, 10),
			}},
			BinaryData: map[string][]byte{shardKey: ch.gz},
			Immutable:  ptr.To(true),
		}
		if err := s.c.Create(ctx, cm); err != nil {
			s.deleteShards(ctx, created)
			return fmt.Errorf("writing inventory shard %s/%s: %w", s.namespace, name, err)
		}
		created = append(created, name)
		sum := sha256.Sum256(ch.gz)
		next.Shards = append(next.Shards, shard{Name: name, Tags: ch.tags, SHA256: hex.EncodeToString(sum[:])})
	}

	doc, err := json.Marshal(next)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: HeadName, ResourceVersion: s.rv, Labels: map[string]string{
			LabelManagedBy: ManagedBy,
			LabelInventory: roleHead,
		}},
		Data: map[string]string{headKey: string(doc)},
	}
	if s.rv == "" {
		err = s.c.Create(ctx, cm)
	} else {
		err = s.c.Update(ctx, cm)
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		// The head is another writer's: these shards are nobody's.
		s.deleteShards(ctx, created)
		return fmt.Errorf("writing the inventory head %s/%s: %w: %w", s.namespace, HeadName, ErrConflict, err)
	case err != nil:
		// The head may have been written: keep the shards (the next Save removes orphans).
		return fmt.Errorf("writing the inventory head %s/%s: %w", s.namespace, HeadName, err)
	}
	s.rv, s.head = cm.ResourceVersion, next
	s.removeStale(ctx)
	return nil
}

// removeStale deletes the shards of generations up to the head's that it does not name: the
// previous generation's, and those of a Save interrupted before its head. A writer's shards
// of a later generation are left alone. A failure is logged: the next Save retries.
func (s *Store) removeStale(ctx context.Context) {
	var list corev1.ConfigMapList
	if err := s.c.List(ctx, &list, client.InNamespace(s.namespace),
		client.MatchingLabels{LabelManagedBy: ManagedBy, LabelInventory: roleShard}); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "listing stale inventory shards", "namespace", s.namespace)
		return
	}
	var stale []string
	for i := range list.Items {
		cm := &list.Items[i]
		gen, err := strconv.ParseInt(cm.Labels[LabelGeneration], 10, 64)
		if err != nil || gen > s.head.Generation {
			continue
		}
		if !slices.ContainsFunc(s.head.Shards, func(sh shard) bool { return sh.Name == cm.Name }) {
			stale = append(stale, cm.Name)
		}
	}
	s.deleteShards(ctx, stale)
}

func (s *Store) deleteShards(ctx context.Context, names []string) {
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: name}}
		if err := s.c.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "deleting an inventory shard", "namespace", s.namespace, "name", name)
		}
	}
}

// chunk is one shard's compressed data.
type chunk struct {
	gz   []byte
	tags int
}

// encodeShards splits tags into shards of at most MaxShardBytes compressed each, in order.
func encodeShards(tags []keep.Tag) ([]chunk, error) {
	enc := make([][]byte, len(tags))
	for i := range tags {
		b, err := json.Marshal(&tags[i])
		if err != nil {
			return nil, err
		}
		enc[i] = b
	}
	var out []chunk
	for start := 0; start < len(enc); {
		end, size := start, 0
		for end < len(enc) && (end == start || size+len(enc[end]) <= chunkJSON) {
			size += len(enc[end]) + 1
			end++
		}
		chunks, err := compressFitting(enc[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, chunks...)
		start = end
	}
	return out, nil
}

// compressFitting compresses tags into one shard, or halves them until each half fits.
func compressFitting(tags [][]byte) ([]chunk, error) {
	gz, err := compress(tags)
	if err != nil {
		return nil, err
	}
	if len(gz) <= MaxShardBytes {
		return []chunk{{gz: gz, tags: len(tags)}}, nil
	}
	if len(tags) == 1 {
		return nil, fmt.Errorf("%w: a tag of %d bytes exceeds a shard", ErrTooLarge, len(tags[0]))
	}
	a, err := compressFitting(tags[:len(tags)/2])
	if err != nil {
		return nil, err
	}
	b, err := compressFitting(tags[len(tags)/2:])
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// compress writes {"tags":[...]} of the encoded tags, gzip-compressed.
func compress(tags [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write([]byte(`{"tags":[`))
	for i, t := range tags {
		if i > 0 {
			_, _ = zw.Write([]byte{','})
		}
		_, _ = zw.Write(t)
	}
	_, _ = zw.Write([]byte(`]}`))
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// randomID tells apart the shards of two Saves of the same generation.
func randomID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
