package keep

import (
	"strings"

	"github.com/distribution/reference"
)

// dockerPullable is the scheme dockershim and cri-dockerd put before a repository digest.
const dockerPullable = "docker-pullable://"

// DigestFromImageID returns the manifest digest in a container's status imageID, false when it
// holds none. Accepted: "<repository>@<digest>" (containerd, CRI-O) and the same after
// "docker-pullable://". A bare "sha256:…", or one after "docker://", is the local image ID (the
// config's digest, not the manifest's) and gives false, as does anything else: the digest is
// then resolved by tag.
func DigestFromImageID(imageID string) (string, bool) {
	s := strings.TrimPrefix(imageID, dockerPullable)
	if !strings.Contains(s, "@") || strings.Contains(s, "://") {
		return "", false
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", false
	}
	d, ok := named.(reference.Digested)
	if !ok {
		return "", false
	}
	return d.Digest().String(), true
}

// refKeys are the keys of a reference in a [Used] set: "repository:tag" and
// "repository@digest", normalized, each empty when the reference has none. ok is false when the
// reference does not parse.
func refKeys(ref string) (tagKey, digestKey string, ok bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", false
	}
	named = reference.TagNameOnly(named)
	name := named.Name()
	if t, isTagged := named.(reference.Tagged); isTagged {
		tagKey = name + ":" + t.Tag()
	}
	if d, isDigested := named.(reference.Digested); isDigested {
		digestKey = name + "@" + d.Digest().String()
	}
	return tagKey, digestKey, true
}

// digestOfKey is the digest of a "repository@digest" key, "" for none.
func digestOfKey(key string) string {
	_, digest, _ := strings.Cut(key, "@")
	return digest
}

// splitTag splits a normalized reference into its repository and tag; false when it has no tag.
func splitTag(ref string) (repository, tag string, ok bool) {
	k, _, parsed := refKeys(ref)
	if !parsed || k == "" {
		return "", "", false
	}
	i := strings.LastIndexByte(k, ':')
	return k[:i], k[i+1:], true
}
