// nsbox_test.go: the Go client against a real `nsbox serve` on a private socket ($NSBOX_BIN).
package nsbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const primeCode = `def nth_prime(n):
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            count += 1
    return candidate
print(nth_prime(1000))
`

// startServe runs `nsbox serve` on a private socket and state dir, with extra arguments; it skips (with the reason)
// when this nsbox has no serve command.
func startServe(t *testing.T, extra ...string) *Client {
	t.Helper()
	bin := os.Getenv("NSBOX_BIN")
	if bin == "" {
		bin = "../../build/src/nsbox"
	}
	if err := exec.Command(bin, "serve", "--help").Run(); err != nil {
		t.Skipf("this nsbox (%s) has no serve command: %v", bin, err)
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, "api.sock")
	args := append([]string{"serve", "--socket", socket, "--state-dir", filepath.Join(dir, "state")}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nsbox serve: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	c, err := NewClient("unix://"+socket, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if c.Healthz(context.Background()) == nil {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nsbox serve did not answer on %s", socket)
	return nil
}

func TestDefaultSocketIsWhereTheServerPutsIt(t *testing.T) {
	for _, c := range []struct {
		uid  int
		xdg  string
		want string
	}{
		{0, "/run/u", "/run/nsbox/api.sock"},
		{1000, "/run/u", "/run/u/nsbox/api.sock"},
		{1000, "", "/tmp/nsbox-1000/api.sock"}, // cron, ssh without logind: not root's socket
	} {
		if got := defaultSocketFor(c.uid, c.xdg); got != c.want {
			t.Errorf("uid %d, XDG_RUNTIME_DIR %q: %s, want %s", c.uid, c.xdg, got, c.want)
		}
	}
}

func TestADefaultSocketDirectoryAnotherUserMadeInTmpIsRefused(t *testing.T) {
	dir := "/tmp/nsbox-4242"
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := dir + "/api.sock"
	if err := os.Chown(dir, 4243, 4243); err != nil {
		t.Skipf("cannot chown (not root?): %v", err)
	}
	if err := checkOwnDirectory(socket, 4242); err == nil || !strings.Contains(err.Error(), "belongs to uid 4243") {
		t.Errorf("another user's directory: %v", err)
	}
	_ = os.Chown(dir, 4242, 4242)
	_ = os.Chmod(dir, 0o777)
	if err := checkOwnDirectory(socket, 4242); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("a directory others may write: %v", err)
	}
	_ = os.Chmod(dir, 0o700)
	if err := checkOwnDirectory(socket, 4242); err != nil {
		t.Errorf("the user's own directory: %v", err)
	}
}

func TestExecuteComputesThe1000thPrime(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t), FreshSandboxPerCall: true})
	res, err := rt.Execute(context.Background(), "python", primeCode)
	if err != nil || strings.TrimSpace(res.Output) != "7919" || res.ExitCode != 0 {
		t.Fatalf("got %+v, %v; want 7919, exit 0", res, err)
	}
}

func TestNonZeroExitIsAResultWithStderrInOutput(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t), FreshSandboxPerCall: true})
	res, err := rt.Execute(context.Background(), "python", "import sys\nprint('before')\nsys.exit(3)\n")
	if err != nil || res.ExitCode != 3 || !strings.Contains(res.Output, "before") {
		t.Fatalf("got %+v, %v; want exit 3 with its output", res, err)
	}
	res, err = rt.Execute(context.Background(), "python", "raise ValueError('boom')")
	if err != nil || res.ExitCode != 1 || !strings.Contains(res.Output, "ValueError: boom") {
		t.Fatalf("got %+v, %v; want exit 1 with the traceback", res, err)
	}
}

func countSandboxes(t *testing.T, c *Client) int {
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return len(list)
}

// sandboxesLeft polls the server's listing until it is empty or 15 s have passed, and returns its last count: a
// create cut short by the caller's context may leave a sandbox that the server removes on its own, a little later.
func sandboxesLeft(t *testing.T, c *Client) int {
	n := countSandboxes(t, c)
	for end := time.Now().Add(15 * time.Second); n != 0 && time.Now().Before(end); n = countSandboxes(t, c) {
		time.Sleep(100 * time.Millisecond)
	}
	return n
}

var timeLimitMs = regexp.MustCompile(`time limit of (\d+) ms`)

func TestDeadlineShorterThanTheProgramKillsItWithATimeOut(t *testing.T) {
	c := startServe(t)
	rt, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	res, err := rt.Execute(ctx, "python", "import time\ntime.sleep(60)\n")
	var e *Error
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "time-out") || !errors.As(err, &e) {
		t.Fatalf("got %+v, %v; want a time-out error", res, err)
	}
	// Either the context ended the call (no result), or the server's result came in time: then the program ran
	// under a limit inside the 1.5 s deadline, not under the 60 s default.
	if e.Result != nil {
		ms := -1
		if m := timeLimitMs.FindStringSubmatch(e.Result.Reason); m != nil {
			ms, _ = strconv.Atoi(m[1])
		}
		if ms < 0 || ms >= 1500 {
			t.Fatalf("the program ran under %q; want a limit within the 1.5 s deadline", e.Result.Reason)
		}
	}
	if n := sandboxesLeft(t, c); n != 0 {
		t.Fatalf("%d sandboxes left after the time-out", n)
	}
}

func TestCancellationEndsTheRun(t *testing.T) {
	c := startServe(t)
	rt, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	_, err := rt.Execute(ctx, "python", "import time\ntime.sleep(60)\n")
	if !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want a cancellation error", err)
	}
	if n := sandboxesLeft(t, c); n != 0 {
		t.Fatalf("%d sandboxes left after the cancellation", n)
	}
}

func Test32GoroutinesEachGetTheirOwnResult(t *testing.T) {
	rt, _ := NewRuntime(RuntimeOptions{Client: startServe(t)})
	defer rt.Close(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := rt.Execute(context.Background(), "python", fmt.Sprintf("print(%d * 1000 + 7)", i))
			if want := fmt.Sprint(i*1000 + 7); err != nil || strings.TrimSpace(res.Output) != want {
				errs <- fmt.Errorf("call %d: got %+v, %v; want %s", i, res, err, want)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStatePersistsInOneSandboxAndNotAcrossFreshOnes(t *testing.T) {
	c := startServe(t)
	ctx := context.Background()
	write := "open('state.txt', 'w').write('kept')"
	read := "import os\nprint(open('state.txt').read() if os.path.exists('state.txt') else 'absent')"
	one, _ := NewRuntime(RuntimeOptions{Client: c})
	defer one.Close(ctx)
	if _, err := one.Execute(ctx, "python", write); err != nil {
		t.Fatal(err)
	}
	if res, err := one.Execute(ctx, "python", read); err != nil || strings.TrimSpace(res.Output) != "kept" {
		t.Fatalf("one sandbox: got %+v, %v; want kept", res, err)
	}
	fresh, _ := NewRuntime(RuntimeOptions{Client: c, FreshSandboxPerCall: true})
	if _, err := fresh.Execute(ctx, "python", write); err != nil {
		t.Fatal(err)
	}
	if res, err := fresh.Execute(ctx, "python", read); err != nil || strings.TrimSpace(res.Output) != "absent" {
		t.Fatalf("fresh sandboxes: got %+v, %v; want absent", res, err)
	}
}

func TestARuntimeWhoseSandboxEndedRunsTheCallInANewOneAndSaysSo(t *testing.T) {
	c := startServe(t)
	ctx := context.Background()
	rt, _ := NewRuntime(RuntimeOptions{Client: c})
	defer rt.Close(ctx)
	if res, err := rt.Execute(ctx, "python", "open('f', 'w').write('x'); print('one')"); err != nil || res.NewSandbox {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	old, _ := rt.Sandbox(ctx)
	if err := old.Terminate(ctx); err != nil { // as its idle time-out or lifetime would end it
		t.Fatal(err)
	}
	res, err := rt.Execute(ctx, "python", "import os; print(os.path.exists('f'))")
	if err != nil || !res.NewSandbox || strings.TrimSpace(res.Output) != "False" {
		t.Fatalf("after the sandbox ended: %+v, %v; want a new sandbox's False", res, err)
	}
	if res, err := rt.Execute(ctx, "python", "print(2)"); err != nil || res.NewSandbox {
		t.Fatalf("the call after: %+v, %v", res, err)
	}
}

func TestARuntimeCallsDeadlineHoldsWhileAnotherCallsCreateIsStuck(t *testing.T) {
	release := make(chan struct{})
	creating := make(chan struct{}, 8)
	c := scriptedServer(t, func(r *http.Request) string {
		select {
		case creating <- struct{}{}:
		default:
		}
		<-release // every create hangs until the test ends
		return rawAnswer("503 Service Unavailable", "application/json", 2, "{}")
	})
	t.Cleanup(func() { close(release) })
	rt, _ := NewRuntime(RuntimeOptions{Client: c})
	go func() { _, _ = rt.Execute(context.Background(), "python", "print(1)") }() // holds the create
	// The first call's create has reached the server: the second call finds it under way.
	select {
	case <-creating:
	case <-time.After(60 * time.Second):
		t.Fatal("the first call's create never reached the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := rt.Execute(ctx, "python", "print(2)"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrCanceled) {
			t.Fatalf("got %v; want the caller's own deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second call waited on the first one's create past its own deadline")
	}
}

// smallSandbox is a sandbox without network, of 256M and 64 pids, on a server of its own; it ends with the test.
func smallSandbox(t *testing.T, ctx context.Context) *Sandbox {
	t.Helper()
	s, err := startServe(t).Create(ctx, SandboxOptions{Network: &NetworkNone, Limits: &Limits{Memory: "256M", Pids: 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Terminate(context.Background()) })
	return s
}

func TestInfoSaysWhatTheSandboxWasMadeWith(t *testing.T) {
	ctx := context.Background()
	s, err := startServe(t).Create(ctx, SandboxOptions{Network: &NetworkNone, Limits: &Limits{Memory: "256M", Pids: 64},
		IdleTimeout: 120 * time.Second, MaxLifetime: 300 * time.Second, Labels: map[string]string{"job": "a1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Terminate(ctx)
	info := s.Info
	if info.IdleTimeoutSeconds != 120 || info.MaxLifetimeSeconds != 300 || info.Labels["job"] != "a1" ||
		info.Rootfs == "" || info.State != "running" {
		t.Fatalf("got %+v; want idle 120 s, lifetime 300 s, label job=a1, a rootfs, running", info)
	}
}

func TestFilesAndStreamingExec(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	if err := s.Files().Write(ctx, "sub/in.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	var chunks []string
	res, err := s.Exec(ctx, ExecRequest{Cmd: "cat sub/in.txt; echo; echo err >&2",
		OnStdout: func(c string) { chunks = append(chunks, c) }})
	if err != nil || res.Stdout != "hello\n" || strings.Join(chunks, "") != "hello\n" {
		t.Fatalf("got %+v, %v, chunks %q", res, err, chunks)
	}
	if _, err := s.Files().Read(ctx, "missing.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read of a missing file: %v; want ErrNotFound", err)
	}
	if err := s.Files().Remove(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
}

func TestAFileNameThatIsNotUTF8IsListedExactlyAndCanBeRead(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	if _, err := s.Exec(ctx, ExecRequest{Cmd: `printf hidden > "$(printf 'report\377.csv')"`}); err != nil {
		t.Fatal(err)
	}
	entries, err := s.Files().List(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	var found *Entry
	for i := range entries {
		if strings.HasPrefix(entries[i].Name, "report") {
			found = &entries[i]
		}
	}
	if found == nil || found.Name != "report\xff.csv" || found.Path != "/workspace/report\xff.csv" {
		t.Fatalf("listed %+v; want the name's own bytes", entries)
	}
	data, err := s.Files().Read(ctx, found.Path)
	if err != nil || string(data) != "hidden" {
		t.Fatalf("read %q: %q, %v", found.Path, data, err)
	}
}

func TestTextThatIsNotUTF8IsRefusedNotChangedOnItsWay(t *testing.T) {
	// encoding/json would send U+FFFD for the byte: the program got another argument, variable or input than given.
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	for _, req := range []ExecRequest{
		{Argv: []string{"/bin/cat", "/workspace/report\xff.csv"}},
		{Cmd: "echo \xff > /workspace/marker"},
		{Cmd: "true", Env: map[string]string{"NAME": "x\xffy"}},
		{Cmd: "cat", Stdin: "x\xffy"},
	} {
		_, err := s.Exec(ctx, req)
		var e *Error
		if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || !strings.Contains(e.Message, "is not UTF-8") {
			t.Fatalf("exec %+v: got %v; want ErrRefused naming the field", req, err)
		}
	}
	if res, err := s.Exec(ctx, ExecRequest{Cmd: "test -e /workspace/marker"}); err != nil || *res.ExitCode != 1 {
		t.Fatalf("a refused exec ran: %+v, %v", res, err)
	}
	for want, opts := range map[string]SandboxOptions{
		"env.A is not UTF-8":         {Env: map[string]string{"A": "\xff"}},
		"template is not UTF-8":      {Template: "host\xff"},
		"labels.k? is not UTF-8":     {Labels: map[string]string{"k\xff": "v"}},
		"limits.memory is not UTF-8": {Limits: &Limits{Memory: "1G\xff"}},
	} {
		_, err := s.client.Create(ctx, opts)
		var e *Error
		if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || !strings.HasPrefix(e.Message, want) {
			t.Fatalf("create %+v: got %v; want ErrRefused saying %q", opts, err, want)
		}
	}
}

func TestACompiledLanguagesCompileStepHasItsOwnLimits(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	res, err := s.Exec(ctx, ExecRequest{Language: "c", Code: "int main(void) { return 4; }",
		CompileTimeout: 30 * time.Second, CompileMemory: "128M"})
	if err != nil || res.Status != "exit" || res.ExitCode == nil || *res.ExitCode != 4 {
		t.Fatalf("got %+v, %v; want exit 4", res, err)
	}
	// Held at 16M, the compiler is killed by the OOM killer; on cgroup v1 it may instead thrash on its own text pages
	// (file pages reclaimed and read again count as progress, so no OOM comes) until its time-out: either way the
	// compile step met its own memory limit, not the sandbox's.
	res, err = s.Exec(ctx, ExecRequest{Language: "cpp", Code: "#include <iostream>\nint main() { std::cout << 1; }",
		CompileMemory: "16M", CompileTimeout: 20 * time.Second})
	compile, _ := res.Raw["compile"].(map[string]interface{})
	peak, _ := compile["peak_memory_bytes"].(float64)
	heldAtLimit := compile["status"] == "oom" || (compile["status"] == "timeout" && peak >= 16<<20)
	if err != nil || res.Status != "compile_error" || !heldAtLimit || peak > 16<<20 {
		t.Fatalf("got %+v, %v; want compile_error with the compile step held at its 16M", res, err)
	}
	if _, err := s.Exec(ctx, ExecRequest{Language: "python", Code: "1", CompileMemory: "64M"}); err == nil ||
		!strings.Contains(err.Error(), "compile_memory") {
		t.Fatalf("compile_memory for python: %v; want a refusal naming it", err)
	}
}

func TestABodyOverTheServersCapIsRefusedEveryTimeNotServerGone(t *testing.T) {
	c := startServe(t, "--max-body", "1M")
	ctx := context.Background()
	s, err := c.Create(ctx, SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Terminate(ctx)
	data := bytes.Repeat([]byte("x"), 2_000_000)
	for i := 0; i < 10; i++ {
		err := s.Files().Write(ctx, "big", data)
		var e *Error
		if !errors.Is(err, ErrRefused) || !errors.As(err, &e) || e.Status != 413 {
			t.Fatalf("write %d: got %v; want ErrRefused with status 413", i, err)
		}
	}
}

func TestAContextDeadlineLowersTheDefaultTimeOutButNeverRaisesIt(t *testing.T) {
	long, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if got := (ExecRequest{Cmd: "true"}).body(long)["timeout"]; got != DefaultExecTimeout.Seconds() {
		t.Errorf("10 min deadline, no Timeout: timeout %v; want the default %v", got, DefaultExecTimeout.Seconds())
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if got := (ExecRequest{Cmd: "true"}).body(short)["timeout"].(float64); got >= 20 || got < 10 {
		t.Errorf("20 s deadline: timeout %v; want it a margin under 20 s", got)
	}
	if got := (ExecRequest{Cmd: "true", Timeout: 5 * time.Second}).body(long)["timeout"]; got != 5.0 {
		t.Errorf("Timeout 5 s, long deadline: timeout %v; want 5", got)
	}
}

func TestRunMergesTheSandboxesAndTheExecsEnvironment(t *testing.T) {
	c := startServe(t)
	res, err := c.Run(context.Background(), SandboxOptions{Env: map[string]string{"A": "1", "C": "sandbox"}},
		ExecRequest{Cmd: "echo A=$A B=$B C=$C", Env: map[string]string{"B": "2", "C": "exec"}})
	if err != nil || res.Stdout != "A=1 B=2 C=exec\n" {
		t.Fatalf("got %+v, %v; want A=1 B=2 C=exec", res, err)
	}
}

func TestAStreamedAnswerWithACharsetIsStillAStream(t *testing.T) {
	for _, ct := range []string{"application/x-ndjson", "application/x-ndjson; charset=utf-8", "Application/X-NDJSON"} {
		if !isNDJSON(ct) {
			t.Errorf("%q not taken for NDJSON", ct)
		}
	}
	if isNDJSON("application/json") {
		t.Error("application/json taken for NDJSON")
	}
}

func TestServerGoneIsTyped(t *testing.T) {
	c, _ := NewClient("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
	_, err := c.Create(context.Background(), SandboxOptions{})
	if !errors.Is(err, ErrServerGone) {
		t.Fatalf("got %v; want ErrServerGone", err)
	}
}

func TestURLsTheClientCannotServeAreRefusedWhenItIsMade(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:1,http://127.0.0.1:2", "unix://tmp/api.sock"} {
		if c, err := NewClient(raw, ""); err == nil {
			t.Fatalf("NewClient(%q) = %v; want an error", raw, c)
		}
	}
}

func TestAStreamedUnavailableLineIsServerGoneWithItsStatus(t *testing.T) {
	c := scriptedServer(t, func(r *http.Request) string {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/sandboxes") {
			return rawAnswer("201 Created", "application/json", 13, `{"id":"sb-x"}`)
		}
		line := `{"type":"error","error":{"code":"unavailable","message":"the server holds too many answers"}}` + "\n"
		return rawAnswer("200 OK", "application/x-ndjson", len(line), line)
	})
	s, err := c.Create(context.Background(), SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Exec(context.Background(), ExecRequest{Cmd: "true", OnStdout: func(string) {}})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrServerGone) || e.Status != 503 || e.Code != "unavailable" {
		t.Fatalf("got %#v; want ErrServerGone with status 503", err)
	}
}

func TestAStreamedErrorLineIsTypedByItsCode(t *testing.T) {
	for code, want := range map[string]error{"conflict": ErrConflict, "not_found": ErrNotFound,
		"bad_request": ErrRefused, "too_many_requests": ErrCapacityFull, "setup_failed": ErrSetupFailed,
		"internal": ErrInternal} {
		if got := kindOfStatus(0, code); got != want {
			t.Fatalf("kindOfStatus(0, %q) = %v; want %v", code, got, want)
		}
	}
}

// scriptedServer answers every request on a private socket with the raw HTTP answer answer(r) gives (r's body can
// be read), then closes the connection: for answers no real server gives on demand (cut short, oddly streamed).
func scriptedServer(t *testing.T, answer func(r *http.Request) string) *Client {
	t.Helper()
	return scriptedServerAt(t, filepath.Join(t.TempDir(), "api.sock"), answer)
}

// scriptedServerAt is scriptedServer on the given socket path.
func scriptedServerAt(t *testing.T, socket string, answer func(r *http.Request) string) *Client {
	t.Helper()
	c, _ := scriptedServerWrites(t, socket, answer)
	return c
}

// scriptedServerWrites is scriptedServerAt that also tells how writing each answer ended: nil when the client took
// it all, an error (a broken pipe, a reset) when the client closed the connection before.
func scriptedServerWrites(t *testing.T, socket string, answer func(r *http.Request) string) (*Client, <-chan error) {
	t.Helper()
	writes := make(chan error, 64)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				_, err = io.WriteString(conn, answer(r))
				select {
				case writes <- err:
				default:
				}
			}()
		}
	}()
	c, err := NewClient("unix://"+socket, "")
	if err != nil {
		t.Fatal(err)
	}
	return c, writes
}

// rawAnswer is an HTTP answer whose Content-Length says length, whatever the body's own length.
func rawAnswer(status, contentType string, length int, body string) string {
	return fmt.Sprintf("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, contentType, length, body)
}

func TestAnAnswerCutShortIsServerGone(t *testing.T) {
	c := scriptedServer(t, func(r *http.Request) string {
		if r.Method == "POST" && r.URL.Path == "/v1/sandboxes" {
			created := `{"id": "sb-cut", "state": "running"}`
			return rawAnswer("201 Created", "application/json", len(created), created)
		}
		// Every other answer promises 4096 bytes, and the connection ends after a few.
		return rawAnswer("200 OK", "application/json", 4096, `{"sandboxes": [], "entries": [], "id": "sb-`)
	})
	ctx := context.Background()
	s, err := c.Create(ctx, SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"connect":     func() error { _, err := c.Connect(ctx, s.ID); return err },
		"list":        func() error { _, err := c.List(ctx); return err },
		"terminate":   func() error { return s.Terminate(ctx) },
		"files.read":  func() error { _, err := s.Files().Read(ctx, "f"); return err },
		"files.list":  func() error { _, err := s.Files().List(ctx, "."); return err },
		"files.write": func() error { return s.Files().Write(ctx, "f", []byte("x")) },
		"exec":        func() error { _, err := s.Exec(ctx, ExecRequest{Cmd: "true"}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrServerGone) {
			t.Errorf("%s of an answer cut short: %v; want ErrServerGone", name, err)
		}
	}
}

func TestAREPLCellReachesTheCallbacksFromItsResult(t *testing.T) {
	// The server answers a REPL cell, streamed or not, with its result alone.
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	if _, err := s.Exec(ctx, ExecRequest{Language: "python", Code: "x = 6 * 7", Repl: true}); err != nil {
		t.Fatal(err)
	}
	var out, errOut []string
	res, err := s.Exec(ctx, ExecRequest{Language: "python", Code: "import sys\nprint(x)\nprint('w', file=sys.stderr)",
		Repl: true, OnStdout: func(c string) { out = append(out, c) },
		OnStderr: func(c string) { errOut = append(errOut, c) }})
	if err != nil || res.Stdout != "42\n" || strings.Join(out, "") != "42\n" || strings.Join(errOut, "") != "w\n" {
		t.Fatalf("got %+v, %v, stdout chunks %q, stderr chunks %q; want 42 and w through the callbacks", res, err, out,
			errOut)
	}
}

func TestTheResultFeedsOnlyTheStreamsOfWhichNoChunkCameAndOnce(t *testing.T) {
	lines := `{"type": "stdout", "data": "streamed\n"}` + "\n" + `{"type": "result", "result": {"status": "ok", ` +
		`"exit_code": 0, "stdout": "streamed\n", "stderr": "only in the result\n"}}` + "\n"
	c := scriptedServer(t, func(r *http.Request) string {
		return rawAnswer("200 OK", "application/x-ndjson", len(lines), lines)
	})
	var out, errOut []string
	_, err := c.Run(context.Background(), SandboxOptions{}, ExecRequest{Cmd: "x",
		OnStdout: func(c string) { out = append(out, c) }, OnStderr: func(c string) { errOut = append(errOut, c) }})
	if err != nil || fmt.Sprint(out) != "[streamed\n]" || fmt.Sprint(errOut) != "[only in the result\n]" {
		t.Fatalf("got %v, stdout chunks %q, stderr chunks %q; want the streamed chunk and the result's stderr once",
			err, out, errOut)
	}
}

// deadlineRecorder notes the deadline of each request the client sends, then sends it on.
type deadlineRecorder struct {
	next      http.RoundTripper
	deadlines []time.Time
}

func (d *deadlineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	deadline, _ := r.Context().Deadline()
	d.deadlines = append(d.deadlines, deadline)
	return d.next.RoundTrip(r)
}

func TestAnExecWaitsForACompiledLanguagesCompileStep(t *testing.T) {
	// The compile runs before the program under its own time-out: a deadline of the program's alone would give
	// up while the server is still compiling.
	result := `{"status": "ok", "exit_code": 0}`
	c := scriptedServer(t, func(r *http.Request) string {
		return rawAnswer("200 OK", "application/json", len(result), result)
	})
	c.RequestTimeout = time.Second
	recorder := &deadlineRecorder{next: c.http.Transport}
	c.http.Transport = recorder
	// RequestTimeout, the program's time-out, the compile step's (CompileTimeout, else 60 s for a compiled
	// language) and 30 s.
	s := time.Second
	for name, tc := range map[string]struct {
		req  ExecRequest
		want time.Duration
	}{
		"c":      {ExecRequest{Language: "c", Code: "x", Timeout: 10 * s, CompileTimeout: 20 * s}, 61},
		"rust":   {ExecRequest{Language: "rust", Code: "x", Timeout: 10 * s}, 101},
		"python": {ExecRequest{Language: "python", Code: "x", Timeout: 10 * s}, 41},
		"cmd":    {ExecRequest{Cmd: "make", Timeout: 10 * s}, 41},
	} {
		start := time.Now()
		if _, err := c.Run(context.Background(), SandboxOptions{}, tc.req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		end := time.Now()
		deadline, want := recorder.deadlines[len(recorder.deadlines)-1], tc.want*s
		if deadline.Before(start.Add(want)) || deadline.After(end.Add(want)) {
			t.Errorf("%s: the request's deadline came %v after the call began; want %v", name, deadline.Sub(start), want)
		}
	}
}

func TestAnExecWithoutATimeoutSendsTheClientsDefault(t *testing.T) {
	// The server's own default (5 s here) is not the client's: the client sends DefaultExecTimeout (60 s, capped at
	// the server's 30 s), the time-out it waits for.
	c := startServe(t, "--default-timeout", "5", "--max-timeout", "30")
	ctx := context.Background()
	s, err := c.Create(ctx, SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Terminate(ctx)
	res, err := s.Exec(ctx, ExecRequest{Cmd: "sleep 6; echo done"})
	if err != nil || res.Status != "ok" || res.Stdout != "done\n" {
		t.Fatalf("got %+v, %v; want ok and done after 6 s", res, err)
	}
}

func TestAnExecSendsTheTimeOutItWaitsFor(t *testing.T) {
	var mu sync.Mutex
	var sent []interface{}
	result := `{"status": "ok", "exit_code": 0}`
	c := scriptedServer(t, func(r *http.Request) string {
		var body map[string]interface{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		sent = append(sent, body["timeout"])
		mu.Unlock()
		return rawAnswer("200 OK", "application/json", len(result), result)
	})
	ctx := context.Background()
	for _, req := range []ExecRequest{{Cmd: "x"}, {Cmd: "x", Timeout: 7 * time.Second}} {
		if _, err := c.Run(ctx, SandboxOptions{}, req); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(sent) != "[60 7]" {
		t.Fatalf("sent the time-outs %v; want [60 7]", sent)
	}
}

func TestADeadlineEndsTheProgramInTimeForItsTimeOutResultAndOutput(t *testing.T) {
	// The program's time-out is set short of the context's deadline: the server's timeout result, with the output
	// so far, arrives before the deadline cancels the request. A 30 s deadline leaves the server a margin of 3 s
	// (deadlineMargin) to end the program and answer; the program would run on past the deadline (the 60 s default,
	// were the time-out not lowered), and the two calls run at once, so the test takes some 27 s.
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	rt, _ := NewRuntime(RuntimeOptions{Client: s.client})
	defer rt.Close(ctx)
	// The runtime's sandbox is made first, outside the deadline: the deadline's call is the program alone.
	if _, err := rt.Execute(ctx, "python", "print(1)"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var res *Result
	var execErr, executeErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		short, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, execErr = s.Exec(short, ExecRequest{Cmd: "echo before; sleep 300"})
	}()
	go func() {
		defer wg.Done()
		short, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, executeErr = rt.Execute(short, "python", "print('before', flush=True)\nimport time\ntime.sleep(300)\n")
	}()
	wg.Wait()
	if execErr != nil || res.Status != "timeout" || res.Stdout != "before\n" {
		t.Fatalf("got %+v, %v; want the timeout result with its output", res, execErr)
	}
	var e *Error
	if !errors.As(executeErr, &e) || e.Kind != ErrTimeout || e.Result == nil || e.Result.Stdout != "before\n" {
		t.Fatalf("got %v (%+v); want ErrTimeout carrying the server's result with its output", executeErr, e)
	}
}

func TestAListingCutShortByTheServerSaysSo(t *testing.T) {
	ctx := context.Background()
	s := smallSandbox(t, ctx)
	if res, err := s.Exec(ctx, ExecRequest{Cmd: "mkdir many && cd many && seq 20005 | xargs touch"}); err != nil ||
		res.Status != "ok" {
		t.Fatalf("got %+v, %v", res, err)
	}
	many, err := s.Files().Listing(ctx, "many")
	if err != nil || len(many.Entries) != 20000 || !many.Truncated {
		t.Fatalf("listed %d entries, truncated %v, %v; want 20000, truncated", len(many.Entries), many.Truncated, err)
	}
	whole, err := s.Files().Listing(ctx, ".")
	if err != nil || len(whole.Entries) != 1 || whole.Truncated {
		t.Fatalf("listed %+v, %v; want many alone, whole", whole, err)
	}
	if entries, err := s.Files().List(ctx, "many"); err != nil || len(entries) != 20000 {
		t.Fatalf("List: %d entries, %v", len(entries), err)
	}
}

func TestAPrintedClientNeverShowsItsToken(t *testing.T) {
	c, err := NewClient("http://127.0.0.1:1", "tok-hidden-123")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{ID: "sb-x", client: c}
	rt, _ := NewRuntime(RuntimeOptions{Client: c})
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		for _, value := range []interface{}{c, *c, s, *s, rt, []*Client{c}} {
			if printed := fmt.Sprintf(verb, value); strings.Contains(printed, "tok-hidden-123") ||
				strings.Contains(printed, fmt.Sprintf("%x", "tok-hidden-123")) {
				t.Fatalf("Sprintf(%q, %T) = %s shows the token", verb, value, printed)
			}
		}
	}
	if printed := fmt.Sprint(c); !strings.Contains(printed, "http://127.0.0.1:1") {
		t.Fatalf("Sprint(client) = %s; want its URL", printed)
	}
}

func TestAUnixSocketPathIsTakenLiterally(t *testing.T) {
	// A URL parser would read %41 as "A" and cut the path at # or ?.
	dir := filepath.Join(t.TempDir(), "a%41#b?c")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	health := `{"status": "ok"}`
	c := scriptedServerAt(t, filepath.Join(dir, "api.sock"), func(r *http.Request) string {
		return rawAnswer("200 OK", "application/json", len(health), health)
	})
	if err := c.Healthz(context.Background()); err != nil {
		t.Fatalf("healthz over %s: %v", dir, err)
	}
	if _, err := NewClient("ftp://host/x", ""); err == nil || !strings.Contains(err.Error(), "unix, http or https") {
		t.Fatalf("NewClient(ftp://...): %v; want the schemes it takes named", err)
	}
}

func TestTheServersInternalFaultIsErrInternalAnsweredOrStreamed(t *testing.T) {
	internal := `{"error": {"code": "internal", "message": "engine fault"}}`
	line := `{"type": "error", "error": {"code": "internal", "message": "engine fault"}}` + "\n"
	c := scriptedServer(t, func(r *http.Request) string {
		if r.URL.Query().Get("stream") == "true" {
			return rawAnswer("200 OK", "application/x-ndjson", len(line), line)
		}
		return rawAnswer("500 Internal Server Error", "application/json", len(internal), internal)
	})
	ctx := context.Background()
	_, err := c.Create(ctx, SandboxOptions{})
	var e *Error
	if !errors.Is(err, ErrInternal) || !errors.As(err, &e) || e.Status != 500 || e.Code != "internal" {
		t.Fatalf("create: %v; want ErrInternal with status 500, code internal", err)
	}
	_, err = c.Run(ctx, SandboxOptions{}, ExecRequest{Cmd: "x", OnStdout: func(string) {}})
	if !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "engine fault") {
		t.Fatalf("a streamed internal error: %v; want ErrInternal", err)
	}
	if kindOfStatus(500, "setup_failed") != ErrSetupFailed || kindOfStatus(500, "") != ErrInternal {
		t.Fatal("a 500 is ErrSetupFailed only with the code setup_failed, else ErrInternal")
	}
}

func TestAnAnswerOverMaxResponseBytesIsErrProtocolNamingTheCapWithTheRestUnread(t *testing.T) {
	if c, _ := NewClient("http://127.0.0.1:1", ""); c.MaxResponseBytes != 256<<20 {
		t.Fatalf("MaxResponseBytes = %d; want 256 MiB by default", c.MaxResponseBytes)
	}
	fourMiB := 4 << 20
	flood := strings.Repeat("x", fourMiB)
	line := `{"type": "stdout", "data": "` + flood[:fourMiB-30]
	mode := ""
	c, writes := scriptedServerWrites(t, filepath.Join(t.TempDir(), "api.sock"), func(r *http.Request) string {
		switch mode {
		case "length":
			return rawAnswer("200 OK", "application/octet-stream", fourMiB, flood)
		case "until close": // no Content-Length: the body ends when the connection does
			return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + flood
		case "line":
			return rawAnswer("200 OK", "application/x-ndjson", len(line), line)
		}
		return rawAnswer("500 Internal Server Error", "text/plain", fourMiB, flood)
	})
	c.MaxResponseBytes = 1 << 20
	ctx := context.Background()
	s := &Sandbox{ID: "sb-x", client: c}
	calls := map[string]func() error{
		"length":      func() error { _, err := s.Files().Read(ctx, "big"); return err },
		"until close": func() error { _, err := s.Exec(ctx, ExecRequest{Cmd: "x"}); return err },
		"line":        func() error { _, err := s.Exec(ctx, ExecRequest{Cmd: "x", OnStdout: func(string) {}}); return err },
		"error body":  func() error { _, err := c.Create(ctx, SandboxOptions{}); return err },
	}
	for _, name := range []string{"length", "until close", "line", "error body"} {
		mode = name
		err := calls[name]()
		want, words := ErrProtocol, "over the client's cap of 1048576 bytes (MaxResponseBytes)"
		if name == "error body" {
			want, words = ErrInternal, "over the client's cap of 1 MiB"
		}
		if !errors.Is(err, want) || !strings.Contains(fmt.Sprint(err), words) {
			t.Fatalf("%s: %v; want %v saying %q", name, err, want, words)
		}
		select {
		case werr := <-writes:
			if werr == nil {
				t.Fatalf("%s: the client read on past its cap", name)
			}
		case <-time.After(60 * time.Second): // a watchdog: the client closes at once, a hung one never does
			t.Fatalf("%s: the answer was still being written", name)
		}
	}
}

func TestARedirectIsAnErrorAndNothingGoesWhereItPoints(t *testing.T) {
	var got []string
	var mu sync.Mutex
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"id": "sb-elsewhere"}`)
	}))
	defer elsewhere.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	c, err := NewClient(redirector.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(context.Background(), SandboxOptions{Env: map[string]string{"SECRET": "s3cret"}})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrProtocol) || e.Status != 307 || !strings.Contains(e.Message,
		"redirect") {
		t.Fatalf("create answered 307: %v; want ErrProtocol with status 307", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("the redirect was followed: %q", got)
	}
}

func TestAnswersOfTheWrongShapeAreErrProtocol(t *testing.T) {
	answer := ""
	c := scriptedServer(t, func(r *http.Request) string {
		ct := "application/json"
		if r.URL.Query().Get("stream") == "true" {
			ct = "application/x-ndjson"
		}
		return rawAnswer("200 OK", ct, len(answer), answer)
	})
	ctx := context.Background()
	s := &Sandbox{ID: "sb-x", client: c}
	run := func() error { _, err := s.Exec(ctx, ExecRequest{Cmd: "x"}); return err }
	stream := func() error { _, err := s.Exec(ctx, ExecRequest{Cmd: "x", OnStdout: func(string) {}}); return err }
	list := func() error { _, err := c.List(ctx); return err }
	connect := func() error { _, err := c.Connect(ctx, "sb-x"); return err }
	create := func() error { _, err := c.Create(ctx, SandboxOptions{}); return err }
	cases := []struct {
		call   func() error
		answer string
	}{
		{run, "null"}, {run, `{"id": "sb-x"}`}, {run, `{"status": "ok", "stdout": 7}`}, {run, "[1]"},
		{stream, `{"type": "result", "result": null}` + "\n"}, {stream, "[1]\n"}, {stream, "null\n"},
		{stream, `{"type": "stdout", "data": 7}` + "\n"}, {stream, `{"type": "error", "error": "x"}` + "\n"},
		{list, "{}"}, {list, `{"sandboxes": null}`}, {list, `{"sandboxes": [null]}`}, {list, `{"sandboxes": [{}]}`},
		{connect, "null"}, {connect, `{"id": ""}`},
		{create, "null"}, {create, "[]"}, {create, "{}"}, {create, `"str"`}, {create, `{"id": 123}`},
	}
	for _, tc := range cases {
		answer = tc.answer
		if err := tc.call(); !errors.Is(err, ErrProtocol) {
			t.Errorf("answer %s: %v; want ErrProtocol", tc.answer, err)
		}
	}
	// A line that is a JSON object of a type this client does not know is skipped.
	answer = `{"type": "progress", "data": 7}` + "\n" + `{"x": 1}` + "\n" + `{"type": "result", "result": ` +
		`{"status": "ok", "stdout": "s"}}` + "\n"
	if r, err := s.Exec(ctx, ExecRequest{Cmd: "x", OnStdout: func(string) {}}); err != nil || r.Stdout != "s" {
		t.Fatalf("an unknown line before the result: %+v, %v; want the result", r, err)
	}
}

func TestAQueryOrFragmentInTheURLIsRefused(t *testing.T) {
	// Each route is appended to the URL: "http://h:1?x=1" sent "/?x=1/v1/sandboxes".
	for _, u := range []string{"http://127.0.0.1:1?x=1", "http://127.0.0.1:1/api#top"} {
		if _, err := NewClient(u, ""); err == nil || !strings.Contains(err.Error(), "a query or fragment") {
			t.Fatalf("NewClient(%q): %v; want it refused", u, err)
		}
	}
	if c, err := NewClient("http://127.0.0.1:1/api/", ""); err != nil || c.base != "http://127.0.0.1:1/api" {
		t.Fatalf("a path prefix: %+v, %v", c, err)
	}
}
