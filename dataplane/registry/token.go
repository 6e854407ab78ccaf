package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// tokens keeps one upstream's bearer tokens by scope until shortly before
// they expire; concurrent requests for a scope share one fetch from the
// realm. At most maxTokens are kept: at the bound, expired ones are
// dropped, and if none has expired, all are (each is fetched again when
// next needed).
type tokens struct {
	mu      sync.Mutex
	kept    map[string]token
	pending map[string]*tokenCall
	now     func() time.Time
}

type token struct {
	value   string
	expires time.Time // when it stops being used: before the realm's expiry
}

type tokenCall struct {
	done chan struct{}
	tok  token
	err  error
}

// maxTokens bounds the scopes kept per upstream.
const maxTokens = 1024

// tokenWait bounds the wait for a realm's answer.
const tokenWait = 10 * time.Second

// maxTokenBytes bounds a realm's answer.
const maxTokenBytes = 64 << 10

func newTokens() *tokens {
	return &tokens{kept: map[string]token{}, pending: map[string]*tokenCall{}, now: time.Now}
}

// cached is scope's token, "" when none is kept or it is about to expire.
func (t *tokens) cached(scope string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok, ok := t.kept[scope]; ok && t.now().Before(tok.expires) {
		return tok.value
	}
	return ""
}

// get returns a token for scope: a kept one, the one a concurrent fetch
// brings, or one fetched now by fetch.
func (t *tokens) get(ctx context.Context, scope string, fetch func(context.Context) (token, error)) (string, error) {
	t.mu.Lock()
	if tok, ok := t.kept[scope]; ok && t.now().Before(tok.expires) {
		t.mu.Unlock()
		return tok.value, nil
	}
	if c, ok := t.pending[scope]; ok {
		t.mu.Unlock()
		select {
		case <-c.done:
			return c.tok.value, c.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	c := &tokenCall{done: make(chan struct{})}
	t.pending[scope] = c
	t.mu.Unlock()
	// The fetch is the realm's, shared: a client that hangs up does not
	// cancel it for the others.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenWait)
	c.tok, c.err = fetch(fctx)
	cancel()
	t.mu.Lock()
	delete(t.pending, scope)
	if c.err == nil {
		t.keepLocked(scope, c.tok)
	}
	t.mu.Unlock()
	close(c.done)
	return c.tok.value, c.err
}

// keepLocked keeps tok for scope, within the bound.
func (t *tokens) keepLocked(scope string, tok token) {
	if len(t.kept) >= maxTokens {
		now := t.now()
		for s, k := range t.kept {
			if !now.Before(k.expires) {
				delete(t.kept, s)
			}
		}
		if len(t.kept) >= maxTokens {
			clear(t.kept)
		}
	}
	t.kept[scope] = tok
}

// credentials are what a credentials file holds.
type credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// readCredentials reads a credentials file afresh (a mounted secret may
// be rotated); "" path means none.
func readCredentials(path string) (*credentials, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentials, err)
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil || c.Username == "" {
		return nil, fmt.Errorf("%w: %s: want JSON {\"username\": ..., \"password\": ...}", ErrCredentials, path)
	}
	return &c, nil
}

// fetchToken asks ch's realm for a token for scope, with creds when set
// (the distribution token spec: GET realm?service=&scope=).
func fetchToken(ctx context.Context, hc *http.Client, ch *challenge, scope string, creds *credentials, now time.Time) (token, error) {
	u := *ch.realm
	q := u.Query()
	if s := ch.params["service"]; s != "" {
		q.Set("service", s)
	}
	if s := ch.params["scope"]; s != "" {
		scope = s
	}
	q.Set("scope", scope)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return token{}, fmt.Errorf("%w: %v", ErrToken, err)
	}
	if creds != nil {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return token{}, fmt.Errorf("%w: realm %s: %v", ErrToken, realmName(ch.realm), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenBytes+1))
	switch {
	case err != nil:
		return token{}, fmt.Errorf("%w: realm %s: reading its answer: %v", ErrToken, realmName(ch.realm), err)
	case resp.StatusCode != http.StatusOK:
		return token{}, fmt.Errorf("%w: realm %s answered %d", ErrToken, realmName(ch.realm), resp.StatusCode)
	case len(body) > maxTokenBytes:
		return token{}, fmt.Errorf("%w: realm %s answered over %d bytes", ErrToken, realmName(ch.realm), maxTokenBytes)
	}
	var ans struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || ans.Token == "" && ans.AccessToken == "" {
		return token{}, fmt.Errorf("%w: realm %s answered no token (want JSON with token or access_token)", ErrToken, realmName(ch.realm))
	}
	value := ans.Token
	if value == "" {
		value = ans.AccessToken
	}
	// The spec's default lifetime is 60 s; the token is used until a
	// tenth of it (at most 30 s) before it expires.
	life := time.Duration(ans.ExpiresIn) * time.Second
	if life <= 0 {
		life = 60 * time.Second
	}
	return token{value: value, expires: now.Add(life - min(life/10, 30*time.Second))}, nil
}

// realmName names a realm in messages without its query.
func realmName(u *url.URL) string { return u.Scheme + "://" + u.Host + u.Path }
