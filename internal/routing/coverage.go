package routing

import (
	"cmp"
	"slices"
)

// Coverage is what the resources of an index can cover, selectors left aside, in the index's
// own normalized forms: for a filter that must let through every pod whose images a resource
// could route (the webhook's matchConditions, internal/admitscope). The dry-run resources are
// included, since the webhook decides for them too.
type Coverage struct {
	// Repositories are the repository entries, normalized (docker.io/library/nginx), sorted and
	// without duplicates: an image whose repository is one of them is covered.
	Repositories []string
	// Groups are the repositoryGroup entries, normalized without their trailing '/', sorted and
	// without duplicates: an image whose repository is one level below one of them is covered.
	Groups []string
	// Mirrors are the ImageMirrors that route (rewritePolicy None left out), by name.
	Mirrors []MirrorCoverage
}

// MirrorCoverage is an ImageMirror's share of a Coverage: every image but those under
// Destination, those ExcludeImages match, and those it cannot name (a host with a port, an
// IPv6 address or an upper-case letter; a name too long).
type MirrorCoverage struct {
	Name string
	// Destination is spec.destination.path normalized, without its trailing '/'.
	Destination string
	// ExcludeImages are the compiled excludeImages, in spec order.
	ExcludeImages []ExcludeGlob
}

// ExcludeGlob is one excludeImages entry as the index matches it: Name is a doublestar glob on
// the normalized repository name (Docker Hub's short names applied when its first segment is
// literal); Tag and Digest, when HasTag or HasDigest, are globs on the image's tag and digest.
type ExcludeGlob struct {
	Name              string
	Tag, Digest       string
	HasTag, HasDigest bool
}

// Coverage returns what the index's resources can cover, those with spec.dryRun included.
func (ix *Index) Coverage() Coverage {
	var c Coverage
	if ix == nil {
		return c
	}
	if ix.withDryRun != nil {
		ix = ix.withDryRun
	}
	for _, res := range ix.alternatives {
		for i := range res.entries {
			if res.group {
				c.Groups = append(c.Groups, res.entries[i].path)
			} else {
				c.Repositories = append(c.Repositories, res.entries[i].path)
			}
		}
	}
	slices.Sort(c.Repositories)
	c.Repositories = slices.Compact(c.Repositories)
	slices.Sort(c.Groups)
	c.Groups = slices.Compact(c.Groups)
	for _, m := range ix.mirrors {
		mc := MirrorCoverage{Name: m.name, Destination: m.dest}
		for _, g := range m.excludes {
			mc.ExcludeImages = append(mc.ExcludeImages, ExcludeGlob{Name: g.name, Tag: g.tag, Digest: g.digest, HasTag: g.hasTag, HasDigest: g.hasDigest})
		}
		c.Mirrors = append(c.Mirrors, mc)
	}
	slices.SortFunc(c.Mirrors, func(a, b MirrorCoverage) int { return cmp.Compare(a.Name, b.Name) })
	return c
}
