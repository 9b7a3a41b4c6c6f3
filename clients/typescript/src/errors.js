// clients/typescript/src/errors.js: the typed errors of the client; each carries the server's message and code.
// A program's own failure (non-zero exit, time-out, oom) is never an error: it is an ExecResult with a status.

export class NsboxError extends Error {
  constructor(message, { status = null, code = null, body = null, url = null, requestSent = true, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.status = status; // HTTP status, null when no answer came
    this.code = code; // the server's error code, e.g. "not_found"
    this.body = body; // the decoded error body, or null
    this.url = url; // the endpoint
    this.requestSent = requestSent; // false: nothing reached a server, safe to send elsewhere
  }
}

/** 404: unknown sandbox (or another client's), missing file, unknown route. */
export class NotFoundError extends NsboxError {}
/** 400, 401, 403, 405, 413: the server refused the request. */
export class RefusedError extends NsboxError {}
/** 429: the node has no room; `capacity` is its capacity document. */
export class CapacityFullError extends RefusedError {
  get capacity() {
    return this.body?.capacity ?? null;
  }
}
/** 409: the sandbox has ended. */
export class ConflictError extends NsboxError {}
/** 500 setup_failed: the sandbox could not be made; the message is the engine's reason. */
export class SetupFailedError extends NsboxError {}
/** 500 internal (or any 500 but setup_failed), also as a stream's error line: a fault of the server itself. */
export class InternalError extends NsboxError {}
/** No server: connection refused or reset, the answer cut short, or 503 (shutting down). */
export class ServerGoneError extends NsboxError {}
/** No answer within the client's deadline. For an exec, the program may have run. */
export class RequestTimeoutError extends NsboxError {}

const BY_STATUS = {
  400: RefusedError, 401: RefusedError, 403: RefusedError, 404: NotFoundError, 405: RefusedError,
  409: ConflictError, 413: RefusedError, 429: CapacityFullError, 503: ServerGoneError,
};

/** The class of an error answer: by its status; a 500 is SetupFailedError only with the code setup_failed. */
function classOf(status, code) {
  if (status === 500) return code === 'setup_failed' ? SetupFailedError : InternalError;
  return BY_STATUS[status] ?? NsboxError;
}

// The status each error code of the server goes with: a streamed answer carries only the code (its 200 is sent).
const STATUS_OF_CODE = {
  bad_request: 400, unauthorized: 401, forbidden: 403, not_found: 404, method_not_allowed: 405, conflict: 409,
  payload_too_large: 413, too_many_requests: 429, internal: 500, setup_failed: 500, unavailable: 503,
};

/** The error for an error line of a streamed answer ({"code", "message"}): the class its code's status has. */
export function fromStreamError(error, url) {
  const code = error?.code ?? null;
  const status = STATUS_OF_CODE[code] ?? null;
  const Cls = status ? classOf(status, code) : NsboxError;
  return new Cls(error?.message ?? 'the server reported an error mid-stream', { status, code, body: { error }, url });
}

/**
 * The error for a non-2xx answer; `body` is the raw Buffer of the answer, its first MiB when `cut` (the rest was not
 * read: the message says so).
 */
export function fromResponse(status, body, url, { cut = false } = {}) {
  let decoded = null;
  try {
    decoded = body && body.length ? JSON.parse(body.toString('utf8')) : null;
  } catch {
    decoded = null;
  }
  let message = decoded?.error?.message;
  const code = decoded?.error?.code ?? null;
  if (typeof message !== 'string' || !message) {
    const first = body ? body.toString('utf8').trim().split('\n')[0].slice(0, 200) : '';
    message = `HTTP ${status} from ${url || 'the server'}${first ? ': ' + first : ''}`;
  }
  if (cut) message += " (the error body is over the client's cap of 1 MiB; the rest was not read)";
  const Cls = classOf(status, code);
  return new Cls(message, { status, code, body: decoded && typeof decoded === 'object' ? decoded : null, url });
}
