// errors.go: the typed errors of the nsbox Go client (time-out, refused, server gone, ...), matched with errors.Is.
package nsbox

import (
	"errors"
	"fmt"
)

// Kinds of failure. Match them with errors.Is(err, nsbox.ErrTimeout) and so on. A program's own failure
// (non-zero exit) is not an error: it is a Result.
var (
	ErrTimeout        = errors.New("time-out")                      // the exec ran out of time (its own or the context's)
	ErrCanceled       = errors.New("canceled")                      // the context was canceled; the exec was ended
	ErrRefused        = errors.New("refused")                       // 400, 401, 403, 405, 413, 429: the server said no
	ErrCapacityFull   = errors.New("capacity full")                 // 429 (also ErrRefused)
	ErrNotFound       = errors.New("not found")                     // 404: unknown sandbox, file or route
	ErrConflict       = errors.New("sandbox ended")                 // 409; once the server removed it, ErrNotFound
	ErrSetupFailed    = errors.New("sandbox set-up failed")         // 500 setup_failed, or a setup_error result
	ErrInternal       = errors.New("internal server error")         // 500 internal (any 500 but setup_failed)
	ErrServerGone     = errors.New("server gone")                   // connection refused or cut, 503 shutting down
	ErrRequestTimeout = errors.New("no answer in time")             // no answer within the client's own deadline
	ErrProtocol       = errors.New("unexpected answer from server") // breaks the API contract
)

// Error is every error the client returns. Kind is one of the Err* values above.
type Error struct {
	Kind    error
	Op      string // "create", "exec", "files.read", ...
	Status  int    // the HTTP status, 0 when there was no answer
	Code    string // the API's error code ("bad_request", ...), empty when there was no answer
	Message string
	Result  *Result // for a time-out or a set-up error: what the server reported, when it did
	Err     error   // the underlying error (a context error, a network error), may be nil
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("nsbox %s: %s: %s", e.Op, e.Kind, msg)
}

// Is matches the error's kind, and ErrRefused for a full capacity.
func (e *Error) Is(target error) bool {
	return target == e.Kind || (e.Kind == ErrCapacityFull && target == ErrRefused)
}

func (e *Error) Unwrap() error { return e.Err }

// statusOfCode is the HTTP status each error code of the server goes with: a streamed answer's error line carries
// only the code (its 200 is sent already).
var statusOfCode = map[string]int{
	"bad_request": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404, "method_not_allowed": 405,
	"conflict": 409, "payload_too_large": 413, "too_many_requests": 429, "internal": 500, "setup_failed": 500,
	"unavailable": 503,
}

// kindOfStatus maps an HTTP error status to a kind; a status of 0 is taken from the code.
func kindOfStatus(status int, code string) error {
	if status == 0 {
		status = statusOfCode[code]
	}
	switch {
	case status == 429:
		return ErrCapacityFull
	case status == 404:
		return ErrNotFound
	case status == 409:
		return ErrConflict
	case status == 503:
		return ErrServerGone
	case code == "setup_failed":
		return ErrSetupFailed
	case status == 500:
		return ErrInternal
	case status >= 400 && status < 500:
		return ErrRefused
	}
	return ErrProtocol
}
