package transfer

import (
	"fmt"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestReferrersAndCosignTagsFollowTheImage(t *testing.T) {
	src, dst := newSide(t, "src"), newSide(t, "dst")
	img := src.image(t, "lib/app", false, 1, 512, "amd64")
	src.manifest(t, "lib/app", "v1", img.MediaType, mustRaw(t, src, "lib/app@"+img.Digest.String()), nil)
	sigTag := fmt.Sprintf("sha256-%s.sig", img.Digest.Hex)
	sig := src.blob(t, "lib/app", []byte(`{"critical":{}}`), "application/vnd.dev.cosign.simplesigning.v1+json")
	cfg := src.blob(t, "lib/app", []byte(`{}`), types.OCIConfigJSON)
	src.manifest(t, "lib/app", sigTag, types.OCIManifestSchema1,
		fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"config":%s,"layers":[%s]}`, types.OCIManifestSchema1, js(cfg), js(sig)), nil)
	sbom := src.blob(t, "lib/app", []byte(`{"spdxVersion":"SPDX-2.3"}`), "application/spdx+json")
	empty := src.blob(t, "lib/app", []byte(`{}`), "application/vnd.oci.empty.v1+json")
	referrer := src.manifest(t, "lib/app", "", types.OCIManifestSchema1,
		fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"artifactType":"application/spdx+json","config":%s,"layers":[%s],"subject":%s}`,
			types.OCIManifestSchema1, js(empty), js(sbom), js(img)), nil)

	opts := options(src, dst)
	if _, err := Copy(t.Context(), src.ref(t, "lib/app:v1"), dst.ref(t, "m/app:v1"), opts); err != nil {
		t.Fatal(err)
	}
	srcRepo, _ := name.NewRepository(src.front.Host + "/lib/app")
	dstRepo, _ := name.NewRepository(dst.front.Host + "/m/app")
	res, err := CopyReferrers(t.Context(), srcRepo, dstRepo, img.Digest, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tags) != 1 || res.Tags[0] != sigTag || len(res.Referrers) != 1 || res.Referrers[0] != referrer.Digest {
		t.Fatalf("copied %+v, want %s and %s", res, sigTag, referrer.Digest)
	}
	if _, d := rawAt(t, dst, "m/app:"+sigTag); d != func() v1.Hash { _, h := rawAt(t, src, "lib/app:"+sigTag); return h }() {
		t.Fatal("the signature tag differs at the destination")
	}
	idx, err := remote.Referrers(dstRepo.Digest(img.Digest.String()), remote.WithAuth(dst.auth))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != referrer.Digest {
		t.Fatalf("destination referrers %+v, want %s", m.Manifests, referrer.Digest)
	}
	// Again: everything present, nothing written.
	dst.front.Reset()
	if _, err := CopyReferrers(t.Context(), srcRepo, dstRepo, img.Digest, opts); err != nil {
		t.Fatal(err)
	}
	if n := dst.front.UploadedBytes(); n != 0 {
		t.Fatalf("%d bytes uploaded on the second pass", n)
	}
}
