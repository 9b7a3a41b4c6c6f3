// client.go: the HTTP transport of the nsbox Go client (Unix socket or TCP, bearer token, JSON errors).
package nsbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Client speaks the nsbox serve API v1. Make one with NewClient or FromEnv; it is safe for concurrent use. Printed
// (fmt's %v, %+v, %#v, ...), it shows its URL and never its token.
type Client struct {
	url  string // the URL given (or the default socket's)
	base string // "http://nsbox" for a Unix socket, else the URL given
	// The bearer token, nil for none; behind a pointer so that fmt, printing by reflection a struct that holds the
	// client (a Sandbox with %s, say), shows an address and never the token.
	token *string
	http  *http.Client
	// RequestTimeout bounds a call whose context has no deadline; an exec adds its own time-out (60 s when not set),
	// a compiled language's compile time-out (CompileTimeout, else 60 s) and 30 s.
	RequestTimeout time.Duration
	// MaxResponseBytes is the most of one answer (a file read too) or of one stream line the client holds in memory
	// (0: DefaultMaxResponseBytes). A larger one fails the call with ErrProtocol, naming the cap, and the connection
	// is closed with the rest unread.
	MaxResponseBytes int64
}

// DefaultMaxResponseBytes is MaxResponseBytes when not set (NewClient sets it), as the Python and TypeScript
// clients' default: 256 MiB.
const DefaultMaxResponseBytes = 256 << 20

// maxErrorBodyBytes is the most of an error answer's body read: its first MiB makes the error, the rest is unread.
const maxErrorBodyBytes = 1 << 20

// maxResponse is the cap on an answer or a stream line.
func (c *Client) maxResponse() int64 {
	if c.MaxResponseBytes > 0 {
		return c.MaxResponseBytes
	}
	return DefaultMaxResponseBytes
}

// tooLarge is the error of an answer, or of a stream line, over the cap.
func (c *Client) tooLarge(op, what string) *Error {
	return &Error{Kind: ErrProtocol, Op: op, Message: fmt.Sprintf(
		"%s is over the client's cap of %d bytes (MaxResponseBytes); the rest was not read", what, c.maxResponse())}
}

// noRedirects keeps the answer of a redirect (3xx) as it is: following it would send the request's body (code,
// environment, stdin) to wherever the server points. A 3xx is then an error, as in the Python and TypeScript clients.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// FromEnv makes a client from NSBOX_URL (unix:///path/api.sock or http://host:port; default the
// per-user or system socket) and NSBOX_TOKEN.
func FromEnv() (*Client, error) {
	return NewClient(os.Getenv("NSBOX_URL"), os.Getenv("NSBOX_TOKEN"))
}

// DefaultSocket is the socket nsbox serve listens on by default, by the server's own rule: /run/nsbox/api.sock for
// root, else $XDG_RUNTIME_DIR/nsbox/api.sock, or /tmp/nsbox-UID/api.sock without XDG_RUNTIME_DIR.
func DefaultSocket() string { return defaultSocketFor(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR")) }

// checkOwnDirectory refuses a default socket under /tmp in a directory another user made: /tmp is everyone's, and
// such a directory's owner could listen there for the user's code and secrets. The server refuses such a directory
// too. A missing one passes (no server to talk to yet).
func checkOwnDirectory(socket string, uid int) error {
	dir := filepath.Dir(socket)
	if !strings.HasPrefix(dir, "/tmp/") {
		return nil
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return nil
	}
	problem := ""
	st, ok := info.Sys().(*syscall.Stat_t)
	switch {
	case !info.IsDir():
		problem = "is not a directory"
	case ok && int(st.Uid) != uid && st.Uid != 0:
		problem = fmt.Sprintf("belongs to uid %d, not to uid %d (another user made it?)", st.Uid, uid)
	case info.Mode().Perm()&0o022 != 0:
		problem = fmt.Sprintf("is writable by other users (mode %04o)", info.Mode().Perm())
	}
	if problem != "" {
		return fmt.Errorf("nsbox: the default socket's directory %s %s: set NSBOX_URL or XDG_RUNTIME_DIR", dir, problem)
	}
	return nil
}

func defaultSocketFor(uid int, runtimeDir string) string {
	if uid == 0 {
		return "/run/nsbox/api.sock"
	}
	if runtimeDir != "" {
		return runtimeDir + "/nsbox/api.sock"
	}
	return fmt.Sprintf("/tmp/nsbox-%d/api.sock", uid)
}

// NewClient makes a client for rawURL (unix:///path or http://host:port; empty for the default socket).
func NewClient(rawURL, token string) (*Client, error) {
	if rawURL == "" {
		socket := DefaultSocket()
		if err := checkOwnDirectory(socket, os.Geteuid()); err != nil {
			return nil, err
		}
		rawURL = "unix://" + socket
	}
	if strings.Contains(rawURL, ",") {
		// The Python and TypeScript clients place sandboxes over several nodes; this one talks to one.
		return nil, fmt.Errorf("nsbox: NSBOX_URL %q: several nodes are not supported by the Go client; give one URL",
			rawURL)
	}
	// One connection per request: a refused connection then always means nothing was sent. A large body waits for
	// the server's 100 Continue (request): a refusal (413, 401) then comes before the body, not as a broken pipe.
	transport := &http.Transport{DisableKeepAlives: true, ExpectContinueTimeout: expectContinueTimeout}
	c := &Client{url: rawURL, RequestTimeout: 60 * time.Second, MaxResponseBytes: DefaultMaxResponseBytes}
	if token != "" {
		c.token = &token
	}
	if len(rawURL) >= len("unix://") && strings.EqualFold(rawURL[:len("unix://")], "unix://") {
		// The socket path is what follows unix:// as it is: a file name may hold %, # or ?, which a URL parser
		// would decode or cut off.
		socket := rawURL[len("unix://"):]
		if !strings.HasPrefix(socket, "/") { // unix://tmp/api.sock
			return nil, fmt.Errorf("nsbox: NSBOX_URL %q: a unix:// URL needs an absolute path (unix:///path)", rawURL)
		}
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
		c.base = "http://nsbox"
		c.http = &http.Client{Transport: transport, CheckRedirect: noRedirects}
		return c, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("nsbox: NSBOX_URL %q: %v", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("nsbox: NSBOX_URL %q: the scheme must be unix, http or https", rawURL)
	}
	if strings.ContainsAny(rawURL, "?#") { // an empty "?" or "#" too, which url.Parse keeps no field of
		// Each route is appended to the URL: a query would swallow it ("/?x=1/v1/sandboxes").
		return nil, fmt.Errorf("nsbox: NSBOX_URL %q: a query or fragment has no place in an endpoint", rawURL)
	}
	// A path is where the API is mounted behind a proxy (http://host/nsbox): each route goes below it.
	c.base = strings.TrimRight(rawURL, "/")
	c.http = &http.Client{Transport: transport, CheckRedirect: noRedirects}
	return c, nil
}

// String describes the client by its URL; the token never shows.
func (c Client) String() string {
	token := "none"
	if c.token != nil {
		token = "set"
	}
	return fmt.Sprintf("nsbox.Client{url: %s, token: %s, RequestTimeout: %s}", c.url, token, c.RequestTimeout)
}

// Format prints String for every verb (%v, %+v, %#v, %s, %d, ...): fmt would otherwise print the token field.
func (c Client) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, c.String()) }

// apiError is the body of every non-2xx answer.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Bodies larger than expectContinueBytes are sent after the server's 100 Continue (or after expectContinueTimeout
// without one), as the TypeScript client does: a server that refuses the request answers before the body, where a
// body written into a connection the server has answered and closed fails with a broken pipe that races the answer.
const (
	expectContinueBytes   = 1 << 20
	expectContinueTimeout = 10 * time.Second
)

// request sends one call and returns the answer with a 2xx status; any other outcome is an *Error.
func (c *Client) request(ctx context.Context, op, method, path string, body io.Reader, contentType string,
	extra time.Duration) (*http.Response, context.CancelFunc, error) {
	own := false
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok && c.RequestTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.RequestTimeout+extra)
		own = true
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		cancel()
		return nil, nil, &Error{Kind: ErrProtocol, Op: op, Err: err}
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if req.ContentLength > expectContinueBytes {
		req.Header.Set("Expect", "100-continue")
	}
	if c.token != nil {
		req.Header.Set("Authorization", "Bearer "+*c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		e := transportError(ctx, op, own, err)
		cancel()
		return nil, nil, e
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes+1))
		cut := len(data) > maxErrorBodyBytes
		if cut {
			data = data[:maxErrorBodyBytes]
		}
		var ae apiError
		e := &Error{Op: op, Status: resp.StatusCode}
		if json.Unmarshal(data, &ae) == nil && ae.Error.Code != "" {
			e.Code, e.Message = ae.Error.Code, ae.Error.Message
		} else if resp.StatusCode/100 == 3 {
			e.Message = fmt.Sprintf("HTTP %d: a redirect (to %q), which the client does not follow", resp.StatusCode,
				resp.Header.Get("Location"))
		} else {
			e.Message = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, strings.TrimSpace(string(data)))
		}
		if cut {
			e.Message += " (the error body is over the client's cap of 1 MiB; the rest was not read)"
		}
		e.Kind = kindOfStatus(resp.StatusCode, e.Code)
		return nil, nil, e
	}
	return resp, cancel, nil
}

// transportError names why a call got no (whole) answer: the caller's context, our own deadline, or the server.
func transportError(ctx context.Context, op string, ownDeadline bool, err error) *Error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && ownDeadline:
		return &Error{Kind: ErrRequestTimeout, Op: op, Err: err}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Kind: ErrTimeout, Op: op, Message: "the context's deadline passed", Err: context.DeadlineExceeded}
	case errors.Is(ctx.Err(), context.Canceled):
		return &Error{Kind: ErrCanceled, Op: op, Message: "the context was canceled", Err: context.Canceled}
	}
	return &Error{Kind: ErrServerGone, Op: op, Err: err}
}

// bodyError names why an answer's body could not be read whole: the caller's context, our own deadline (the
// request's context), or the server (the connection ended before the Content-Length or the chunked body's end).
func bodyError(ctx context.Context, resp *http.Response, op string, err error) *Error {
	if ctx.Err() == nil && resp.Request != nil {
		// The request's context is the caller's, with the client's own deadline when the caller gave none.
		_, callers := ctx.Deadline()
		return transportError(resp.Request.Context(), op, !callers, err)
	}
	return transportError(ctx, op, false, err)
}

// readAll reads an answer's body whole; an answer cut short is the server gone, never a shorter body. One over the
// client's MaxResponseBytes is an error, read no further.
func (c *Client) readAll(ctx context.Context, resp *http.Response, op string) ([]byte, error) {
	limit := c.maxResponse()
	if resp.ContentLength > limit {
		return nil, c.tooLarge(op, fmt.Sprintf("the answer (%d bytes)", resp.ContentLength))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, bodyError(ctx, resp, op, err)
	}
	if int64(len(data)) > limit {
		return nil, c.tooLarge(op, "the answer")
	}
	return data, nil
}

// doJSON sends in (when not nil) as JSON and decodes a JSON answer into out (when not nil).
func (c *Client) doJSON(ctx context.Context, op, method, path string, in, out interface{}) error {
	var body io.Reader
	ct := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return &Error{Kind: ErrProtocol, Op: op, Err: err}
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	resp, cancel, err := c.request(ctx, op, method, path, body, ct, 0)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	data, err := c.readAll(ctx, resp, op)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Kind: ErrProtocol, Op: op, Message: "undecodable JSON answer", Err: err}
	}
	return nil
}

// Healthz asks whether the server is up.
func (c *Client) Healthz(ctx context.Context) error {
	return c.doJSON(ctx, "healthz", "GET", "/v1/healthz", nil, nil)
}
