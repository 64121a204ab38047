package transfer

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DefaultMounts is how many blobs NewMounts(0) remembers: about 11 MiB at most, plus the
// repository names.
const DefaultMounts = 100_000

// Mounts remembers, per destination registry, one repository known to hold each blob, so a
// copy into a sibling repository of that registry mounts the blob instead of streaming it
// from the source. It keeps at most its size of blobs, forgetting the least recently used
// first. Safe for concurrent use; a nil *Mounts remembers nothing.
//
// Only sha256 blobs are remembered, by the first 8 bytes of the digest. Two blobs sharing
// them (one chance in 2^64 per pair) share an entry: the mount then names the wrong
// repository, the registry refuses it, and the blob is streamed. A mount always sends the
// full digest, so a wrong entry costs one request, never wrong content.
type Mounts struct {
	mu   sync.Mutex
	max  int
	regs map[string]uint32 // registry → id; registries are few (one per mirror)
	// index finds an entry; entries is a doubly linked list, most recent at head.
	index      map[mountKey]int32
	entries    []mountEntry
	used       int32 // len(entries)
	head, tail int32
	nextReg    uint32
}

// mountKey is one blob on one registry: the first 8 bytes of its sha256.
type mountKey struct {
	prefix uint64
	reg    uint32
}

// mountEntry is a blob and the repository that holds it; prev and next are entry indexes
// (-1: none).
type mountEntry struct {
	key        mountKey
	repo       string
	prev, next int32
}

// NewMounts returns a table of at most size blobs (DefaultMounts when size ≤ 0).
func NewMounts(size int) *Mounts {
	if size <= 0 {
		size = DefaultMounts
	}
	size = min(size, math.MaxInt32)
	return &Mounts{max: size, regs: map[string]uint32{}, index: map[mountKey]int32{}, head: -1, tail: -1}
}

// Len is how many blobs are remembered.
func (m *Mounts) Len() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index)
}

// Record remembers that repo holds blob h.
func (m *Mounts) Record(repo name.Repository, h v1.Hash) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.key(repo.RegistryStr(), h, true)
	if !ok {
		return
	}
	r := repo.RepositoryStr()
	if i, ok := m.index[k]; ok {
		m.entries[i].repo = r
		m.touch(i)
		return
	}
	var i int32
	if int(m.used) < m.max {
		i = m.used
		m.used++
		if len(m.entries) == cap(m.entries) {
			// Grow by doubling, never past max.
			m.entries = slices.Grow(m.entries, min(max(2*len(m.entries), 64), m.max)-len(m.entries))
		}
		m.entries = append(m.entries, mountEntry{})
	} else {
		i = m.tail // the least recently used is overwritten
		m.unlink(i)
		delete(m.index, m.entries[i].key)
	}
	m.entries[i] = mountEntry{key: k, repo: r, prev: -1, next: -1}
	m.index[k] = i
	m.pushFront(i)
}

// Lookup returns a repository on dst's registry, other than dst, known to hold blob h.
func (m *Mounts) Lookup(dst name.Repository, h v1.Hash) (name.Repository, bool) {
	if m == nil {
		return name.Repository{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.key(dst.RegistryStr(), h, false)
	if !ok {
		return name.Repository{}, false
	}
	i, ok := m.index[k]
	if !ok || m.entries[i].repo == dst.RepositoryStr() {
		return name.Repository{}, false
	}
	m.touch(i)
	return dst.Repo(m.entries[i].repo), true
}

// Forget drops blob h if the table names repo for it: a mount from repo failed.
func (m *Mounts) Forget(repo name.Repository, h v1.Hash) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.key(repo.RegistryStr(), h, false)
	if !ok {
		return
	}
	i, ok := m.index[k]
	if !ok || m.entries[i].repo != repo.RepositoryStr() {
		return
	}
	m.unlink(i)
	delete(m.index, k)
	// Move the last entry into the hole, so entries stays dense.
	last := m.used - 1
	if i != last {
		e := m.entries[last]
		m.entries[i] = e
		m.index[e.key] = i
		if e.prev >= 0 {
			m.entries[e.prev].next = i
		} else {
			m.head = i
		}
		if e.next >= 0 {
			m.entries[e.next].prev = i
		} else {
			m.tail = i
		}
	}
	m.entries = m.entries[:last]
	m.used = last
}

// key is h on registry reg; add registers a registry not seen yet.
func (m *Mounts) key(reg string, h v1.Hash, add bool) (mountKey, bool) {
	var k mountKey
	if h.Algorithm != "sha256" || len(h.Hex) != 64 {
		return k, false
	}
	var p [8]byte
	if _, err := hex.Decode(p[:], []byte(h.Hex[:16])); err != nil {
		return k, false
	}
	k.prefix = binary.BigEndian.Uint64(p[:])
	id, ok := m.regs[reg]
	if !ok {
		if !add {
			return k, false
		}
		id = m.nextReg
		m.nextReg++
		m.regs[reg] = id
	}
	k.reg = id
	return k, true
}

// touch makes entry i the most recently used.
func (m *Mounts) touch(i int32) {
	if m.head == i {
		return
	}
	m.unlink(i)
	m.pushFront(i)
}

func (m *Mounts) unlink(i int32) {
	e := &m.entries[i]
	if e.prev >= 0 {
		m.entries[e.prev].next = e.next
	} else {
		m.head = e.next
	}
	if e.next >= 0 {
		m.entries[e.next].prev = e.prev
	} else {
		m.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (m *Mounts) pushFront(i int32) {
	e := &m.entries[i]
	e.prev, e.next = -1, m.head
	if m.head >= 0 {
		m.entries[m.head].prev = i
	}
	m.head = i
	if m.tail < 0 {
		m.tail = i
	}
}
