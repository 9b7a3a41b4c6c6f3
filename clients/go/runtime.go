// runtime.go: nsbox.Runtime, the reference agent pattern's SandboxRuntime (Execute(ctx, language, code)).
package nsbox

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// ExecutionResult is what the reference pattern's SandboxRuntime returns. An agent swapping its runtime for
// nsbox aliases its own type to it: `type ExecutionResult = nsbox.ExecutionResult`.
type ExecutionResult struct {
	Output   string // stdout and stderr together, in the order they came (as exec.Cmd.CombinedOutput)
	ExitCode int    // the program's exit code; -1 when a signal ended it
	// NewSandbox: the runtime's sandbox had ended (its lifetime or idle time-out passed, or it was deleted) and
	// this call ran in a new one: the files and REPL state of earlier calls are gone.
	NewSandbox bool
}

// RuntimeOptions configures a Runtime.
type RuntimeOptions struct {
	Client  *Client        // nil: FromEnv()
	Sandbox SandboxOptions // the sandbox made for the calls
	// FreshSandboxPerCall runs every Execute in a new sandbox (nothing persists); false keeps one sandbox
	// for the runtime's life (files and installed packages persist, as one per conversation). Close ends it.
	FreshSandboxPerCall bool
	OutputLimit         int64 // bytes per stream; 0: the server's default
}

// Runtime runs code in nsbox sandboxes. It is safe for concurrent use.
type Runtime struct {
	opts    RuntimeOptions
	client  *Client
	mu      sync.Mutex
	sandbox *Sandbox
	making  chan struct{} // closed when the create in progress (if any) has ended; nil when none is
}

// NewRuntime makes a Runtime; no sandbox is made before the first Execute.
func NewRuntime(opts RuntimeOptions) (*Runtime, error) {
	c := opts.Client
	if c == nil {
		var err error
		if c, err = FromEnv(); err != nil {
			return nil, err
		}
	}
	return &Runtime{opts: opts, client: c}, nil
}

// Sandbox returns the runtime's sandbox (one-sandbox mode), making it when needed. One call makes it; the others
// wait for that make within their own context (a caller's deadline holds while another's create is slow).
func (r *Runtime) Sandbox(ctx context.Context) (*Sandbox, error) {
	for {
		r.mu.Lock()
		if r.sandbox != nil {
			s := r.sandbox
			r.mu.Unlock()
			return s, nil
		}
		if r.making == nil {
			done := make(chan struct{})
			r.making = done
			r.mu.Unlock()
			s, err := r.client.Create(ctx, r.opts.Sandbox)
			r.mu.Lock()
			r.making = nil
			if err == nil {
				r.sandbox = s
			}
			r.mu.Unlock()
			close(done)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
		wait := r.making
		r.mu.Unlock()
		select {
		case <-wait: // its sandbox, or (that make failed) a make of our own
		case <-ctx.Done():
			return nil, transportError(ctx, "create", false, ctx.Err())
		}
	}
}

// forget drops s as the runtime's sandbox (it has ended), unless another call replaced it already.
func (r *Runtime) forget(s *Sandbox) {
	r.mu.Lock()
	if r.sandbox == s {
		r.sandbox = nil
	}
	r.mu.Unlock()
}

// Close ends the runtime's sandbox, if it made one (after a make in progress, within ctx).
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	for r.making != nil {
		wait := r.making
		r.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return transportError(ctx, "close", false, ctx.Err())
		}
		r.mu.Lock()
	}
	s := r.sandbox
	r.sandbox = nil
	r.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Terminate(ctx)
}

// Execute runs code in the given language. The context's deadline, less a margin (see Sandbox.Exec), is the
// program's time-out and its cancellation ends the program. A time-out, a cancellation or any API failure is an
// *Error (ErrTimeout, ErrCanceled, ErrRefused, ErrServerGone ...), never a made-up result; the time-out's Result is
// what the server reported, its output so far included. A non-zero exit is a result.
func (r *Runtime) Execute(ctx context.Context, language, code string) (ExecutionResult, error) {
	var mu sync.Mutex
	var out strings.Builder
	collect := func(chunk string) { mu.Lock(); out.WriteString(chunk); mu.Unlock() }
	req := ExecRequest{Language: language, Code: code, OutputLimit: r.opts.OutputLimit, OnStdout: collect,
		OnStderr: collect}
	var res *Result
	var err error
	replaced := false
	if r.opts.FreshSandboxPerCall {
		var s *Sandbox
		if s, err = r.client.Create(ctx, r.opts.Sandbox); err != nil {
			return ExecutionResult{}, err
		}
		// The sandbox goes whatever happened, even when ctx is done: nothing is left behind.
		defer func() { _ = s.Terminate(context.Background()) }()
		res, err = s.Exec(ctx, req)
	} else {
		var s *Sandbox
		if s, err = r.Sandbox(ctx); err != nil {
			return ExecutionResult{}, err
		}
		res, err = s.Exec(ctx, req)
		// The sandbox ended (404 or 409 before the program ran): the call runs once more, in a new one.
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
			r.forget(s)
			if s, err = r.Sandbox(ctx); err != nil {
				return ExecutionResult{}, err
			}
			replaced = true
			res, err = s.Exec(ctx, req)
		}
	}
	if err != nil {
		return ExecutionResult{}, err
	}
	switch res.Status {
	case "timeout":
		return ExecutionResult{}, &Error{Kind: ErrTimeout, Op: "execute", Message: "the program ran out of time: " +
			res.Reason, Result: res}
	case "setup_error":
		return ExecutionResult{}, &Error{Kind: ErrSetupFailed, Op: "execute", Message: res.Reason, Result: res}
	}
	if ctx.Err() != nil {
		return ExecutionResult{}, transportError(ctx, "execute", false, ctx.Err())
	}
	exit := -1
	if res.ExitCode != nil {
		exit = *res.ExitCode
	}
	mu.Lock()
	defer mu.Unlock()
	return ExecutionResult{Output: out.String(), ExitCode: exit, NewSandbox: replaced}, nil
}
