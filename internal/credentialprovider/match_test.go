package credentialprovider

import (
	"testing"
)

func TestNormalizeImage(t *testing.T) {
	tests := map[string]struct {
		image, want string
		wantErr     bool
	}{
		"a docker hub short name":                {image: "nginx", want: "docker.io/library/nginx"},
		"a tag is dropped":                       {image: "nginx:1.27", want: "docker.io/library/nginx"},
		"a digest is dropped":                    {image: "quay.io/acme/app@sha256:" + sixtyFourHex, want: "quay.io/acme/app"},
		"a tag and a digest are dropped":         {image: "quay.io/acme/app:v1@sha256:" + sixtyFourHex, want: "quay.io/acme/app"},
		"a repository path is kept":              {image: "quay.io/acme", want: "quay.io/acme"},
		"a path prefix loses its slash":          {image: "quay.io/acme/", want: "quay.io/acme"},
		"a docker hub prefix is expanded":        {image: "acme/", want: "docker.io/acme"},
		"a registry root is a registry":          {image: "registry.tld", want: "registry.tld"},
		"a registry root with a port":            {image: "registry.local:5000", want: "registry.local:5000"},
		"localhost with a port":                  {image: "localhost:5000", want: "localhost:5000"},
		"a mirror path under a registry":         {image: "registry.tld/mirror", want: "registry.tld/mirror"},
		"a short name with a numeric tag":        {image: "nginx:125", want: "docker.io/library/nginx"},
		"an image under a registry with a port":  {image: "registry.local:5000/x:1", want: "registry.local:5000/x"},
		"an upper case repository is refused":    {image: "quay.io/Acme", wantErr: true},
		"an empty image is refused":              {image: "", wantErr: true},
		"a path prefix that is not one, refused": {image: "quay.io/a b/", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := NormalizeImage(tc.image)
			if tc.wantErr {
				if err == nil {
					t.Errorf("NormalizeImage(%q) = %q, want an error", tc.image, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("NormalizeImage(%q) = %q, %v; want %q", tc.image, got, err, tc.want)
			}
		})
	}
}

const sixtyFourHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestMatches(t *testing.T) {
	p := &Provider{Name: "p", MatchImages: []string{"*.dkr.ecr.*.amazonaws.com", "registry.io:8080/team", "docker.io/acme"}}
	tests := map[string]bool{
		"123.dkr.ecr.eu-west-1.amazonaws.com/app:v1": true,
		"123.dkr.ecr.eu-west-1.amazonaws.com":        true,
		"dkr.ecr.eu-west-1.amazonaws.com/app":        false, // one label fewer
		"a.123.dkr.ecr.eu-west-1.amazonaws.com/app":  false, // one label more
		"registry.io:8080/team/app":                  true,
		"registry.io:8080/teams/app":                 true, // a string prefix, as the kubelet
		"registry.io:8080/other/app":                 false,
		"registry.io/team/app":                       false, // no port
		"registry.io:9090/team/app":                  false, // another port
		"acme/app":                                   true,  // normalized to docker.io/acme/app
		"nginx":                                      false, // docker.io/library/nginx
		"not a reference":                            false,
	}
	for image, want := range tests {
		t.Run(image, func(t *testing.T) {
			if got := p.Matches(image); got != want {
				t.Errorf("Matches(%q) = %v, want %v", image, got, want)
			}
		})
	}
}

func TestMatchingAnyReturnsTheFirstMatchingProvider(t *testing.T) {
	cfg := &Config{Providers: []Provider{
		{Name: "team", MatchImages: []string{"registry.io/team"}},
		{Name: "registry", MatchImages: []string{"registry.io", "*.registry.io"}},
		{Name: "other", MatchImages: []string{"other.io"}},
	}}
	tests := map[string]string{
		"registry.io/team/app:v1": "team",
		"registry.io/else/app":    "registry",
		"eu.registry.io/app":      "registry",
		"other.io/x":              "other",
		"quay.io/x":               "",
		"":                        "",
	}
	for image, want := range tests {
		t.Run(image, func(t *testing.T) {
			got := ""
			if p := cfg.MatchingAny(image); p != nil {
				got = p.Name
			}
			if got != want {
				t.Errorf("MatchingAny(%q) = %q, want %q", image, got, want)
			}
		})
	}
	if p := cfg.Provider("other"); p == nil || p.Name != "other" {
		t.Errorf("Provider(other) = %v", p)
	}
	if p := cfg.Provider("none"); p != nil {
		t.Errorf("Provider(none) = %v, want nil", p)
	}
}
