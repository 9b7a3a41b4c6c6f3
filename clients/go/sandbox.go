// sandbox.go: sandboxes of the nsbox Go client: Create, Connect, List, Exec (with streaming), Files, Terminate.
package nsbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// Network is a sandbox's network: NetworkNone (the default), NetworkRestricted (the server's allow list),
// AllowHosts(...), or DangerHostNetwork.
type Network struct {
	mode  string
	allow []string
}

var (
	NetworkNone       = Network{mode: "none"}
	NetworkRestricted = Network{mode: "restricted"}
	// DangerHostNetwork gives the sandbox the host's network: only for trusted code.
	DangerHostNetwork = Network{mode: "host"}
)

// AllowHosts lets the sandbox reach only these host names.
func AllowHosts(hosts ...string) Network { return Network{allow: hosts} }

// MarshalJSON writes "none" | "host" | "restricted" | {"allow": [...]}.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.allow != nil {
		return json.Marshal(map[string][]string{"allow": n.allow})
	}
	if n.mode == "" {
		return json.Marshal("none")
	}
	return json.Marshal(n.mode)
}

// Limits of a sandbox; zero values leave the server's defaults.
type Limits struct {
	Memory string  `json:"memory,omitempty"` // "256M" or a byte count
	Pids   int     `json:"pids,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
	Tmpfs  string  `json:"tmpfs,omitempty"`
}

// SandboxOptions is the body of POST /v1/sandboxes; every field is optional.
type SandboxOptions struct {
	Template    string            `json:"template,omitempty"` // "host" (default), "python" or an image name
	Network     *Network          `json:"network,omitempty"`
	Limits      *Limits           `json:"limits,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	IdleTimeout time.Duration     `json:"-"`
	MaxLifetime time.Duration     `json:"-"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// notText names the first string of v (a request body, or a field of one) that is not UTF-8, or is "". JSON carries
// text: encoding/json would turn such bytes into U+FFFD and the server would get another argv, env or stdin than
// given, silently. (A file's contents are bytes: Files().Write takes any.)
func notText(v interface{}, at string) string {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return at
		}
	case []string:
		for i, s := range x {
			if !utf8.ValidString(s) {
				return fmt.Sprintf("%s[%d]", at, i)
			}
		}
	case map[string]string:
		for k, s := range x {
			if !utf8.ValidString(k) || !utf8.ValidString(s) {
				return at + "." + strings.ToValidUTF8(k, "?")
			}
		}
	case map[string]interface{}:
		for k, e := range x {
			if !utf8.ValidString(k) {
				return at + "." + strings.ToValidUTF8(k, "?")
			}
			if where := notText(e, strings.TrimPrefix(at+"."+k, ".")); where != "" {
				return where
			}
		}
	}
	return ""
}

// refuseNotText is an ErrRefused error for a body with a string that is not UTF-8, before anything is sent.
func refuseNotText(op string, body map[string]interface{}) error {
	if where := notText(body, ""); where != "" {
		return &Error{Kind: ErrRefused, Op: op, Message: where + " is not UTF-8: the API's JSON carries text " +
			"(bytes go into a file, with Files().Write)"}
	}
	return nil
}

// text is the options' strings by their fields' names, as they are before encoding/json replaces what is not UTF-8.
func (o SandboxOptions) text() map[string]interface{} {
	m := map[string]interface{}{"template": o.Template, "env": o.Env, "labels": o.Labels}
	if o.Limits != nil {
		m["limits"] = map[string]interface{}{"memory": o.Limits.Memory, "tmpfs": o.Limits.Tmpfs}
	}
	if o.Network != nil {
		m["network.allow"] = o.Network.allow
	}
	return m
}

func (o SandboxOptions) body() map[string]interface{} {
	data, _ := json.Marshal(o)
	m := map[string]interface{}{}
	_ = json.Unmarshal(data, &m)
	if o.IdleTimeout > 0 {
		m["idle_timeout"] = seconds(o.IdleTimeout)
	}
	if o.MaxLifetime > 0 {
		m["max_lifetime"] = seconds(o.MaxLifetime)
	}
	return m
}

// seconds rounds up to whole seconds, at least 1.
func seconds(d time.Duration) int64 { return int64(math.Max(1, math.Ceil(d.Seconds()))) }

// Info is the server's description of a sandbox.
type Info struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	Rootfs      string            `json:"rootfs"` // the root it runs on: "host", or the image's directory
	Network     json.RawMessage   `json:"network"`
	Limits      json.RawMessage   `json:"limits"`
	Labels      map[string]string `json:"labels"`
	CreatedAtMs int64             `json:"created_at_ms"`
	// The idle time-out and the lifetime in force, in seconds: asked for, or the server's defaults.
	IdleTimeoutSeconds float64 `json:"idle_timeout"`
	MaxLifetimeSeconds float64 `json:"max_lifetime"`
	FromPool           bool    `json:"from_pool"`
	State              string  `json:"state"`
}

// Sandbox is a handle on one sandbox of the server.
type Sandbox struct {
	ID     string
	Info   Info
	client *Client
}

// Create makes a sandbox.
func (c *Client) Create(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	var info Info
	if err := refuseNotText("create", opts.text()); err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "create", "POST", "/v1/sandboxes", opts.body(), &info); err != nil {
		return nil, err
	}
	if info.ID == "" {
		return nil, &Error{Kind: ErrProtocol, Op: "create", Message: "the answer has no sandbox id"}
	}
	return &Sandbox{ID: info.ID, Info: info, client: c}, nil
}

// Connect returns a handle on an existing sandbox of this client (checked with GET).
func (c *Client) Connect(ctx context.Context, id string) (*Sandbox, error) {
	var info Info
	if err := c.doJSON(ctx, "connect", "GET", "/v1/sandboxes/"+url.PathEscape(id), nil, &info); err != nil {
		return nil, err
	}
	if info.ID == "" {
		return nil, &Error{Kind: ErrProtocol, Op: "connect", Message: "the answer has no sandbox id"}
	}
	return &Sandbox{ID: info.ID, Info: info, client: c}, nil
}

// List returns this client's sandboxes.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	var out struct {
		Sandboxes *[]*Info `json:"sandboxes"`
	}
	if err := c.doJSON(ctx, "list", "GET", "/v1/sandboxes", nil, &out); err != nil {
		return nil, err
	}
	if out.Sandboxes == nil {
		return nil, &Error{Kind: ErrProtocol, Op: "list", Message: "the answer has no sandboxes array"}
	}
	infos := make([]Info, 0, len(*out.Sandboxes))
	for _, info := range *out.Sandboxes {
		if info == nil || info.ID == "" {
			return nil, &Error{Kind: ErrProtocol, Op: "list", Message: "a listed sandbox has no id"}
		}
		infos = append(infos, *info)
	}
	return infos, nil
}

// Terminate ends the sandbox and everything in it. A sandbox already gone is not an error.
func (s *Sandbox) Terminate(ctx context.Context) error {
	err := s.client.doJSON(ctx, "terminate", "DELETE", "/v1/sandboxes/"+url.PathEscape(s.ID), nil, nil)
	if e, ok := err.(*Error); ok && e.Kind == ErrNotFound {
		return nil
	}
	return err
}

// ExecRequest says what to run: exactly one of Argv, Cmd (run by /bin/sh -c) or Language with Code.
type ExecRequest struct {
	Argv        []string
	Cmd         string
	Language    string
	Code        string
	Stdin       string
	Timeout     time.Duration // 0: DefaultExecTimeout; a context deadline lowers it (less a margin, see Exec)
	Env         map[string]string
	Cwd         string
	Repl        bool
	OutputLimit int64
	// A compiled language's compile step (c, cpp, go, rust, java, typescript): its own time-out and memory
	// limit ("256M"); zero values leave the language table's. The client's deadline counts the step too:
	// CompileTimeout, or 60 s (the longest default) for a compiled language without one.
	CompileTimeout time.Duration
	CompileMemory  string
	// Called as output comes (streaming). A stream of which no chunk came (a REPL cell, answered with its result
	// alone) gets the result's text once.
	OnStdout func(chunk string)
	OnStderr func(chunk string)
}

// Result is the verdict of one exec, as `nsbox exec --json` prints it. Raw holds every key.
type Result struct {
	Status          string                 `json:"status"` // ok, exit, signal, timeout, oom, violation, setup_error ...
	ExitCode        *int                   `json:"exit_code"`
	Signal          *int                   `json:"signal"`
	Reason          string                 `json:"reason"`
	Stdout          string                 `json:"stdout"`
	Stderr          string                 `json:"stderr"`
	StdoutTruncated bool                   `json:"stdout_truncated"`
	StderrTruncated bool                   `json:"stderr_truncated"`
	WallMs          int64                  `json:"wall_ms"`
	CPUMs           int64                  `json:"cpu_ms"`
	PeakMemoryBytes int64                  `json:"peak_memory_bytes"`
	Raw             map[string]interface{} `json:"-"`
}

// DefaultExecTimeout is an exec's time-out when neither ExecRequest.Timeout nor the context's deadline sets one. It
// is sent to the server, so that the program runs under what the client waits for, whatever the server's own
// default (its --default-timeout).
const DefaultExecTimeout = 60 * time.Second

// deadlineMargin is the part of the time left on the context that the program's time-out leaves to the server, to
// end the program and send its timeout result (with the output so far) before the context ends the request: a
// tenth of it, at least 1 s and at most 5 s, and never more than half of it.
func deadlineMargin(left time.Duration) time.Duration {
	margin := left / 10
	if margin < time.Second {
		margin = time.Second
	}
	if margin > 5*time.Second {
		margin = 5 * time.Second
	}
	if margin > left/2 {
		margin = left / 2
	}
	return margin
}

func (r ExecRequest) body(ctx context.Context) map[string]interface{} {
	m := map[string]interface{}{}
	switch {
	case r.Argv != nil:
		m["argv"] = r.Argv
	case r.Cmd != "":
		m["cmd"] = r.Cmd
	default:
		m["language"], m["code"] = r.Language, r.Code
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = DefaultExecTimeout
	}
	if deadline, ok := ctx.Deadline(); ok {
		// The program's time-out ends a margin before the context: the server's timeout result then arrives in time.
		// A deadline only lowers it: a long one does not lift the default.
		left := time.Until(deadline)
		if left -= deadlineMargin(left); left < timeout {
			timeout = left
		}
	}
	m["timeout"] = math.Max(0.001, timeout.Seconds())
	if r.Stdin != "" {
		m["stdin"] = r.Stdin
	}
	if len(r.Env) > 0 {
		m["env"] = r.Env
	}
	if r.Cwd != "" {
		m["cwd"] = r.Cwd
	}
	if r.Repl {
		m["repl"] = true
	}
	if r.OutputLimit > 0 {
		m["output_limit"] = r.OutputLimit
	}
	if r.CompileTimeout > 0 {
		m["compile_timeout"] = r.CompileTimeout.Seconds()
	}
	if r.CompileMemory != "" {
		m["compile_memory"] = r.CompileMemory
	}
	return m
}

// defaultCompileTimeout is what an exec waits for a compiled language's compile step when the request sets no
// CompileTimeout: the longest of the language table's (rootfs/languages.json: 30 s for c, 60 s for the others),
// taken for any language but the interpreted ones, a bound that is never too short.
const defaultCompileTimeout = 60 * time.Second

var interpretedLanguages = map[string]bool{"python": true, "python3": true, "bash": true, "sh": true, "node": true,
	"javascript": true}

// wait is how much longer than Client.RequestTimeout an exec's answer may take when the context has no deadline:
// its program's time-out (DefaultExecTimeout, which is sent, when none is set), a compiled language's compile step
// before it, and a grace of 30 s.
func (r ExecRequest) wait() time.Duration {
	wait := 30 * time.Second
	if r.Timeout > 0 {
		wait += r.Timeout
	} else {
		wait += DefaultExecTimeout
	}
	compiled := r.Argv == nil && r.Cmd == "" && !interpretedLanguages[strings.ToLower(r.Language)]
	if r.CompileTimeout > 0 {
		wait += r.CompileTimeout
	} else if compiled {
		wait += defaultCompileTimeout
	}
	return wait
}

// decodeResult decodes a result: a JSON object with a status (a non-empty string) and each field of Result of its
// JSON type (null or absent: the zero value).
func decodeResult(data []byte) (*Result, error) {
	if !isObject(data) {
		return nil, errors.New("the result is not a JSON object")
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.Status == "" {
		return nil, errors.New("the result has no status")
	}
	_ = json.Unmarshal(data, &r.Raw)
	return &r, nil
}

// isObject says whether a JSON value is an object (its first byte; json.Unmarshal checks the rest).
func isObject(data []byte) bool {
	data = bytes.TrimSpace(data)
	return len(data) > 0 && data[0] == '{'
}

// errLineTooLong is a stream line over the client's MaxResponseBytes.
var errLineTooLong = errors.New("stream line over the cap")

// readLine reads one line, with its newline when there is one, of at most limit bytes besides the newline.
func readLine(r *bufio.Reader, limit int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		n := int64(len(line) + len(chunk))
		if err == nil {
			n-- // the newline
		}
		if n > limit {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// streamProtocolError is a stream line that breaks the API contract.
func streamProtocolError(message string, err error) *Error {
	return &Error{Kind: ErrProtocol, Op: "exec", Message: message, Err: err}
}

// Exec runs one command in the sandbox and returns its verdict. The program's own failure (non-zero exit,
// time-out, oom) is a Result, not an error. The context's deadline lowers the exec's time-out, less a margin
// (deadlineMargin: a tenth of the time left, 1 s to 5 s), so that the server's timeout result, with the output so
// far, arrives before the deadline; the context's cancellation ends the request, which ends the exec.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (*Result, error) {
	return s.client.exec(ctx, "/v1/sandboxes/"+url.PathEscape(s.ID)+"/exec", req.body(ctx), req)
}

// Run runs one command in a one-shot sandbox (POST /v1/run), gone when the answer comes.
func (c *Client) Run(ctx context.Context, opts SandboxOptions, req ExecRequest) (*Result, error) {
	if err := refuseNotText("exec", opts.text()); err != nil {
		return nil, err
	}
	body := opts.body()
	for k, v := range req.body(ctx) {
		if k == "env" && body["env"] != nil {
			// The sandbox's environment and the exec's, as Create then Exec would give them (the exec's wins).
			env := map[string]string{}
			for name, value := range opts.Env {
				env[name] = value
			}
			for name, value := range req.Env {
				env[name] = value
			}
			v = env
		}
		body[k] = v
	}
	return c.exec(ctx, "/v1/run", body, req)
}

func (c *Client) exec(ctx context.Context, path string, body map[string]interface{}, req ExecRequest) (*Result, error) {
	if err := refuseNotText("exec", body); err != nil {
		return nil, err
	}
	data, _ := json.Marshal(body)
	stream := req.OnStdout != nil || req.OnStderr != nil
	if stream {
		path += "?stream=true"
	}
	resp, cancel, err := c.request(ctx, "exec", "POST", path, bytes.NewReader(data), "application/json", req.wait())
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	if !stream || !isNDJSON(resp.Header.Get("Content-Type")) {
		all, err := c.readAll(ctx, resp, "exec")
		if err != nil {
			return nil, err
		}
		r, err := decodeResult(all)
		if err != nil {
			return nil, &Error{Kind: ErrProtocol, Op: "exec", Message: "undecodable result", Err: err}
		}
		// A server without streaming: hand the whole output over at the end.
		req.handOver(r, false, false)
		return r, nil
	}
	var gotStdout, gotStderr bool // whether a chunk of each stream came
	reader := bufio.NewReader(resp.Body)
	for {
		line, err := readLine(reader, c.maxResponse())
		if err == errLineTooLong {
			return nil, c.tooLarge("exec", "a stream line")
		}
		if len(bytes.TrimSpace(line)) > 0 {
			// Each line is a JSON object; one whose type this client does not know is skipped (docs/clients.md).
			var ev map[string]json.RawMessage
			if jerr := json.Unmarshal(line, &ev); jerr != nil || ev == nil {
				return nil, streamProtocolError("a stream line is not a JSON object", jerr)
			}
			var kind, data string
			_ = json.Unmarshal(ev["type"], &kind)
			if raw, ok := ev["data"]; ok && (kind == "stdout" || kind == "stderr") {
				if jerr := json.Unmarshal(raw, &data); jerr != nil {
					return nil, streamProtocolError("a "+kind+" line's data is not a string", jerr)
				}
			}
			switch kind {
			case "stdout":
				gotStdout = true
				if req.OnStdout != nil {
					req.OnStdout(data)
				}
			case "stderr":
				gotStderr = true
				if req.OnStderr != nil {
					req.OnStderr(data)
				}
			case "result":
				r, jerr := decodeResult(ev["result"])
				if jerr != nil {
					return nil, streamProtocolError("undecodable result", jerr)
				}
				req.handOver(r, gotStdout, gotStderr)
				return r, nil
			case "error":
				var body struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				}
				if !isObject(ev["error"]) || json.Unmarshal(ev["error"], &body) != nil {
					return nil, streamProtocolError("an error line's error is not {code, message}", nil)
				}
				e := &Error{Op: "exec", Code: body.Code, Message: body.Message}
				// The status the code has as an answer's own (as Python and TypeScript give it): 503 for
				// "unavailable" (nothing ran, try again), not the 200 the stream began with.
				e.Status = statusOfCode[e.Code]
				e.Kind = kindOfStatus(0, e.Code)
				return nil, e
			}
		}
		if err != nil {
			// The stream ended before its result: the context, or the server went away.
			return nil, bodyError(ctx, resp, "exec", err)
		}
	}
}

// handOver gives each callback the result's output of its stream when no chunk of that stream came (a REPL cell
// is answered with its result alone, and a server may answer the whole result at once), so no output is lost.
func (r ExecRequest) handOver(res *Result, gotStdout, gotStderr bool) {
	if r.OnStdout != nil && res.Stdout != "" && !gotStdout {
		r.OnStdout(res.Stdout)
	}
	if r.OnStderr != nil && res.Stderr != "" && !gotStderr {
		r.OnStderr(res.Stderr)
	}
}

// isNDJSON says whether a Content-Type is newline-delimited JSON, parameters (charset) allowed.
func isNDJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/x-ndjson"
}
