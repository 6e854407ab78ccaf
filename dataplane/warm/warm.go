// Package warm preheats container images into a mirror policy's cache:
// it resolves each reference (an index to its platforms' manifests, each
// manifest to its config and layers) and asks for every manifest and blob
// through the node's own client listener, as a pull would, so that each is
// filled by its owner, once, from its upstream registry. What is stored
// already is found cached: warming twice fetches nothing the second time.
package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/shardcache/shardcache/proto/shardcache/v1"
	"github.com/shardcache/shardcache/sdk/policy"
)

// Config configures a Warmer.
type Config struct {
	// Node is this node's id, named in the summary.
	Node string
	// Base is the URL of this node's client listener: every request goes
	// there, so the ring routes it. Required.
	Base string
	// Policies are the node's: the mirror is the policy of /v2/ at Base.
	Policies *atomic.Pointer[policy.Set]
	// Parallel is how many blobs are filled at once; 0 means 4.
	Parallel int
	// HeaderTimeout bounds the wait for each answer's header; 0 means 60 s
	// (a cold blob's owner answers once its upstream does).
	HeaderTimeout time.Duration
}

// Warmer preheats images.
type Warmer struct {
	cfg  Config
	http *http.Client
}

// MaxImages bounds the references of one warm.
const MaxImages = 64

// maxManifestBytes bounds a manifest read, as the mirror's.
const maxManifestBytes = 4 << 20

// maxBlobs bounds the blobs of one image (its layers and config, over
// every platform preheated).
const maxBlobs = 4096

// maxManifests bounds the platform manifests of one index preheated: an
// index of every platform and its attestations lists a few dozen; one that
// lists more for --platform fails its image, before any is fetched past
// the bound.
const maxManifests = 256

// ErrInvalid wraps refusals of a request.
var ErrInvalid = errors.New("warm: invalid request")

// New returns a Warmer.
func New(cfg Config) *Warmer {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 60 * time.Second
	}
	return &Warmer{cfg: cfg, http: &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		ResponseHeaderTimeout: cfg.HeaderTimeout,
		MaxIdleConnsPerHost:   cfg.Parallel + 2,
		DisableCompression:    true,
	}}}
}

// image is one reference resolved against the mirror.
type image struct {
	ref, host, name, reference string
}

// Warm preheats req's images, calling emit for each step (from one
// goroutine at a time), and returns the summary. An image that fails is
// counted and named; it does not stop the others.
func (w *Warmer) Warm(ctx context.Context, req *pb.WarmRequest, emit func(*pb.WarmProgress)) (*pb.WarmSummary, error) {
	imgs, platform, p, err := w.parse(req)
	if err != nil {
		return nil, err
	}
	run := &warming{w: w, ctx: ctx, platform: platform, emit: emit, seen: map[string]bool{}, sum: &pb.WarmSummary{Node: w.cfg.Node}}
	if p.PullTokenFile != "" {
		// The mirror asks its clients for the cluster's pull token: so
		// does it ask the warm's requests.
		tok, err := os.ReadFile(p.PullTokenFile)
		if err != nil {
			return nil, fmt.Errorf("warm: reading the mirror's pull token: %w", err)
		}
		run.token = strings.TrimSpace(string(tok))
	}
	for _, img := range imgs {
		run.sum.Images++
		run.image(img)
	}
	return run.sum, nil
}

// parse checks req against the node's mirror policy.
func (w *Warmer) parse(req *pb.WarmRequest) ([]image, platformSpec, *policy.Policy, error) {
	if len(req.GetImages()) == 0 || len(req.GetImages()) > MaxImages {
		return nil, platformSpec{}, nil, fmt.Errorf("%w: %d images: name 1 to %d", ErrInvalid, len(req.GetImages()), MaxImages)
	}
	plat, err := parsePlatform(req.GetPlatform())
	if err != nil {
		return nil, plat, nil, err
	}
	base, err := url.Parse(w.cfg.Base)
	if err != nil {
		return nil, plat, nil, fmt.Errorf("warm: the node's client URL %q: %w", w.cfg.Base, err)
	}
	p := w.cfg.Policies.Load().Match(policy.Host(&http.Request{Host: base.Host}), "/v2/")
	if len(p.Registries) == 0 {
		return nil, plat, nil, fmt.Errorf("%w: no mirror policy (one with registries) covers /v2/ on this node", ErrInvalid)
	}
	var imgs []image
	for _, ref := range req.GetImages() {
		img, err := parseImage(ref, p)
		if err != nil {
			return nil, plat, nil, err
		}
		imgs = append(imgs, img)
	}
	return imgs, plat, p, nil
}

// parseImage reads [host/]name[:tag|@digest] against mirror p.
func parseImage(ref string, p *policy.Policy) (image, error) {
	img := image{ref: ref}
	rest := ref
	if name, dg, ok := strings.Cut(rest, "@"); ok {
		rest, img.reference = name, dg
	}
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		if img.reference == "" {
			img.reference = rest[i+1:]
		}
		rest = rest[:i]
	}
	if img.reference == "" {
		img.reference = "latest"
	}
	reg := p.DefaultRegistry
	if first, after, ok := strings.Cut(rest, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		if reg = p.Registry(first); reg == nil {
			return img, fmt.Errorf("%w: %s: registry %q is not one the mirror serves", ErrInvalid, ref, first)
		}
		rest = after
	}
	if reg == nil {
		return img, fmt.Errorf("%w: %s names no registry and the mirror has no default_registry", ErrInvalid, ref)
	}
	if reg.Host == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest // Docker Hub's official images
	}
	if rest == "" {
		return img, fmt.Errorf("%w: %q names no repository", ErrInvalid, ref)
	}
	img.host, img.name = reg.Host, rest
	return img, nil
}

// warming is one Warm call's state.
type warming struct {
	w        *Warmer
	ctx      context.Context
	platform platformSpec
	mu       sync.Mutex // emit and sum
	emit     func(*pb.WarmProgress)
	sum      *pb.WarmSummary
	seen     map[string]bool // blobs asked for already, over every image
	token    string          // the mirror's pull token, "" when it asks for none
	// imageDone counts the blobs of the image being warmed that are done.
	imageDone uint32
}

func (r *warming) report(p *pb.WarmProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch p.Result {
	case "filled":
		r.sum.Filled++
	case "cached":
		r.sum.Cached++
	case "failed":
		r.sum.Failed++
	}
	if p.Kind == "blob" {
		r.imageDone++
		p.Done = r.imageDone
		r.sum.Blobs++
		r.sum.Bytes += p.Bytes
	} else if p.Result != "failed" {
		r.sum.Manifests++
	}
	if r.emit != nil {
		r.emit(p)
	}
}

// image preheats one image: its manifest (or index, and the platforms'
// manifests), then every blob, Parallel at once.
func (r *warming) image(img image) {
	blobs, err := r.manifests(img)
	if err != nil {
		r.report(&pb.WarmProgress{Image: img.ref, Kind: "manifest", Digest: img.reference, Result: "failed", Error: err.Error()})
		return
	}
	var todo []descriptor
	for _, b := range blobs {
		if !r.seen[b.Digest] {
			r.seen[b.Digest] = true
			todo = append(todo, b)
		}
	}
	sem := make(chan struct{}, r.w.cfg.Parallel)
	var wg sync.WaitGroup
	r.mu.Lock()
	r.imageDone = 0
	r.mu.Unlock()
	for _, b := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := r.blob(img, b)
			p.Total = uint32(len(todo))
			r.report(p)
		})
	}
	wg.Wait()
}

// descriptor is an OCI descriptor, as manifests and indexes list them.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
	} `json:"platform"`
}

// manifest is the part of an image manifest or index warming reads.
type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    *descriptor  `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"`
}

// acceptAll is every manifest type a registry may answer with.
var acceptAll = []string{
	"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json",
}

// manifests fetches img's manifest and, for an index, the manifests of
// its platforms; it returns the blobs they list.
func (r *warming) manifests(img image) ([]descriptor, error) {
	m, err := r.manifest(img, img.reference, acceptAll)
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return m.blobs(), nil
	}
	var blobs []descriptor
	matched := 0
	for _, d := range m.Manifests {
		if !r.platform.matches(d) {
			continue
		}
		if matched++; matched > maxManifests {
			return nil, fmt.Errorf("the index lists more than %d manifests for platform %s", maxManifests, r.platform)
		}
		pm, err := r.manifest(img, d.Digest, []string{d.MediaType})
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, pm.blobs()...)
		if len(blobs) > maxBlobs {
			return nil, fmt.Errorf("more than %d blobs", maxBlobs)
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("the index lists no manifest for platform %s", r.platform)
	}
	return blobs, nil
}

func (m *manifest) blobs() []descriptor {
	var out []descriptor
	if m.Config != nil && m.Config.Digest != "" {
		out = append(out, *m.Config)
	}
	return append(out, m.Layers...)
}

// manifest asks for one manifest through the mirror and reports it.
func (r *warming) manifest(img image, reference string, accept []string) (*manifest, error) {
	resp, err := r.get(img, "/manifests/"+reference, accept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", reference, err)
	}
	if len(body) > maxManifestBytes {
		return nil, fmt.Errorf("manifest %s is over %d bytes", reference, maxManifestBytes)
	}
	var m manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("manifest %s is not JSON: %w", reference, err)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && m.MediaType == "" {
		m.MediaType = mt
	}
	digest := resp.Header.Get("Docker-Content-Digest")
	if digest == "" {
		digest = reference
	}
	r.report(&pb.WarmProgress{Image: img.ref, Kind: "manifest", Digest: digest, Bytes: int64(len(body)), Result: result(resp)})
	return &m, nil
}

// blob asks for one blob through the mirror, reading its body whole (the
// owner stores it as it streams).
func (r *warming) blob(img image, d descriptor) *pb.WarmProgress {
	p := &pb.WarmProgress{Image: img.ref, Kind: "blob", Digest: d.Digest, Bytes: d.Size}
	resp, err := r.get(img, "/blobs/"+d.Digest, nil)
	if err != nil {
		p.Result, p.Error = "failed", err.Error()
		return p
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		p.Result, p.Error = "failed", fmt.Sprintf("the blob broke off after %d bytes: %v", n, err)
		return p
	}
	p.Bytes, p.Result = n, result(resp)
	return p
}

// get asks the node's client listener for path under img's repository,
// naming its registry by ns=, as containerd does.
func (r *warming) get(img image, path string, accept []string) (*http.Response, error) {
	u := strings.TrimSuffix(r.w.cfg.Base, "/") + "/v2/" + img.name + path + "?ns=" + url.QueryEscape(img.host)
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header["Accept"] = accept
	req.Header.Set("User-Agent", "shardcache-warm")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.w.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("%s: %d %s", strings.TrimPrefix(path, "/"), resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// result is what the node's answer says it did: a hit was stored
// already, anything else was filled now.
func result(resp *http.Response) string {
	if resp.Header.Get("X-Cache") == "HIT" {
		return "cached"
	}
	return "filled"
}

// platformSpec is the platform of an index's manifests to warm.
type platformSpec struct {
	all               bool
	os, arch, variant string
}

func parsePlatform(s string) (platformSpec, error) {
	switch s {
	case "":
		return platformSpec{os: "linux", arch: "amd64"}, nil
	case "all":
		return platformSpec{all: true}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return platformSpec{}, fmt.Errorf("%w: platform %q: want os/arch or os/arch/variant (linux/arm64/v8), or all", ErrInvalid, s)
	}
	ps := platformSpec{os: parts[0], arch: parts[1]}
	if len(parts) == 3 {
		ps.variant = parts[2]
	}
	return ps, nil
}

func (p platformSpec) matches(d descriptor) bool {
	if p.all {
		return true
	}
	if d.Platform == nil {
		return false
	}
	return d.Platform.OS == p.os && d.Platform.Architecture == p.arch && (p.variant == "" || d.Platform.Variant == p.variant)
}

func (p platformSpec) String() string {
	switch {
	case p.all:
		return "all"
	case p.variant != "":
		return p.os + "/" + p.arch + "/" + p.variant
	}
	return p.os + "/" + p.arch
}
