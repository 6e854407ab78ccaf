package registry

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Verifier is a body that checks, at its end, that the bytes read have
// the digest expected: a mismatch is returned in place of io.EOF (an
// *Error of code DIGEST_INVALID wrapping ErrDigest), so a copy into the
// store fails, nothing is stored, and the client is told why.
type Verifier struct {
	r      io.Reader
	h      hash.Hash
	want   string
	failed func()
}

// Verify wraps r to check it against digest ("sha256:<hex>" or
// "sha512:<hex>"); ok is false for an algorithm the node cannot check.
// failed, when set, is called on a mismatch.
func Verify(r io.Reader, digest string, failed func()) (*Verifier, bool) {
	algo, hexPart, _ := strings.Cut(digest, ":")
	var h hash.Hash
	switch {
	case algo == "sha256" && len(hexPart) == 64:
		h = sha256.New()
	case algo == "sha512" && len(hexPart) == 128:
		h = sha512.New()
	default:
		return nil, false
	}
	return &Verifier{r: r, h: h, want: strings.ToLower(hexPart), failed: failed}, true
}

func (v *Verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			if v.failed != nil {
				v.failed()
			}
			return n, &Error{Status: http.StatusBadGateway, Code: CodeDigestInvalid, Err: ErrDigest,
				Message: fmt.Sprintf("the body's digest begins %s, not the one asked for; nothing stored", got[:12])}
		}
	}
	return n, err
}

// CheckDigest reports whether digest can be checked by the node.
func CheckDigest(digest string) bool {
	_, ok := Verify(nil, digest, nil)
	return ok
}

// MaxCheckedBlobBytes is the largest blob read whole and checked before
// any of it is served (a config, a small layer), so that a mismatch is a
// 502; a larger one, or one of no stated length, streams as it arrives.
const MaxCheckedBlobBytes = 1 << 20

// Ingest checks an upstream's 200 answer to ref before anything of it is
// stored or served: a manifest or listing, or a blob of at most
// MaxCheckedBlobBytes, is read whole, at most MaxManifestBytes, and its
// digest checked against the one asked for (or, by tag, the one the
// upstream names in Docker-Content-Digest); a larger blob's body is
// wrapped to be checked at its end, failing the copy into the store.
// failed is called on a mismatch. The error is an *Error (502).
func Ingest(resp *http.Response, ref *Ref, failed func()) error {
	// What a registry says of its session and its caching is the
	// mirror's, never a client's: a cookie set on the mirror's
	// credentialed fetch would be replayed to every client, and the
	// policy's tag_ttl, not the registry's directives, says how long a
	// tag is served (a stale-while-revalidate of a week kept a moved tag).
	for _, k := range []string{"Set-Cookie", "Cache-Control", "Expires", "Pragma"} {
		delete(resp.Header, k)
	}
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	want := ""
	if ref.ByDigest() {
		want = ref.Reference
		// The digest its body is checked against: what one registry
		// claimed is never stored for every registry's clients.
		resp.Header.Set("Docker-Content-Digest", want)
	} else if d := resp.Header.Get("Docker-Content-Digest"); ref.Kind == KindManifest && CheckDigest(d) {
		want = d
	}
	if !ref.Bounded() && (resp.ContentLength < 0 || resp.ContentLength > MaxCheckedBlobBytes) {
		v, _ := Verify(resp.Body, want, failed)
		resp.Body = verifiedBody{v, resp.Body}
		return nil
	}
	if resp.ContentLength > MaxManifestBytes {
		return &Error{Status: http.StatusBadGateway, Code: CodeSizeInvalid, Err: ErrTooLarge,
			Message: fmt.Sprintf("the upstream's answer is %d bytes, over the %d a manifest may have", resp.ContentLength, MaxManifestBytes)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestBytes+1))
	resp.Body.Close()
	switch {
	case err != nil:
		return upstreamError(err, "reading the upstream's answer")
	case len(body) > MaxManifestBytes:
		return &Error{Status: http.StatusBadGateway, Code: CodeSizeInvalid, Err: ErrTooLarge,
			Message: fmt.Sprintf("the upstream's answer is over the %d bytes a manifest may have", MaxManifestBytes)}
	}
	if want != "" {
		what := "manifest"
		if ref.Kind == KindBlob {
			what = "blob"
		}
		v, _ := Verify(bytes.NewReader(body), want, nil)
		if _, err := io.Copy(io.Discard, v); err != nil {
			if failed != nil {
				failed()
			}
			return &Error{Status: http.StatusBadGateway, Code: CodeDigestInvalid, Err: ErrDigest,
				Message: "the upstream's " + what + " does not have digest " + want + ": " + err.Error() + "; nothing stored"}
		}
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// verifiedBody is a blob's body checked as it is read.
type verifiedBody struct {
	*Verifier
	io.Closer
}
