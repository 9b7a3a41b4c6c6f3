// clients/typescript/index.d.ts: the types of the nsbox package (hand-written; checked by tests/clients/typescript).

export interface ConnectOptions {
  /** `unix:///path/api.sock`, `http://host:port`, several (array or comma-separated); default NSBOX_URL. */
  url?: string | string[];
  /** Bearer token for TCP; default NSBOX_TOKEN. */
  token?: string;
  /** Deadline of a call that runs no program, in ms (default 60000). */
  requestTimeoutMs?: number;
  /** The most of one answer (a file read too) or stream line held, in bytes (default 256 MiB); over it: NsboxError. */
  maxResponseBytes?: number;
  signal?: AbortSignal;
}

export type Network = 'none' | 'host' | 'restricted' | { allow: string[] };

export interface Limits {
  memory?: string | number;
  pids?: number;
  cpus?: number;
  tmpfs?: string | number;
}

export interface CreateOptions extends ConnectOptions {
  template?: string;
  network?: Network;
  limits?: Limits;
  env?: Record<string, string>;
  idleTimeout?: number;
  /** Seconds the sandbox may live. */
  maxLifetime?: number;
  /** The same as maxLifetime: give one of them, not both (a TypeError). */
  timeout?: number;
  labels?: Record<string, string>;
}

export interface SandboxInfo {
  id: string;
  template: string;
  network: unknown;
  limits: Record<string, unknown>;
  labels: Record<string, string>;
  created_at_ms: number;
  idle_timeout: number;
  max_lifetime: number;
  from_pool: boolean;
  state: string;
  [key: string]: unknown;
}

export interface ExecOptions {
  /** Program time-out in seconds; when not given, 60 is sent (the server's own default is never relied on). */
  timeout?: number;
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  repl?: boolean;
  outputLimit?: number;
  /**
   * Called with each chunk as it comes (the answer is then streamed). A stream of which no chunk came (a REPL cell,
   * answered with its result alone) gets the result's text once.
   */
  onStdout?: (chunk: string) => void;
  onStderr?: (chunk: string) => void;
  signal?: AbortSignal;
}

export interface RunCodeOptions extends ExecOptions {
  language?: string;
  /**
   * A compiled language's compile step: its time-out in seconds (capped by the server's --max-timeout). The client
   * waits for it too: this, or 60 s for a compiled language when not given.
   */
  compileTimeout?: number;
  /** A compiled language's compile step: its own memory limit, '256M' or bytes. */
  compileMemory?: string | number;
}

export type RunStatus = 'ok' | 'exit' | 'signal' | 'timeout' | 'oom' | 'violation' | 'setup_error' |
  'session_lost' | 'killed' | 'compile_error';

export interface RawResult {
  status: RunStatus;
  exit_code: number;
  signal: number;
  reason: string;
  stdout: string;
  stderr: string;
  stdout_bytes: number;
  stderr_bytes: number;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  wall_ms: number;
  cpu_ms: number;
  peak_memory_bytes: number;
  [key: string]: unknown;
}

export declare class ExecResult {
  constructor(raw: RawResult);
  readonly raw: RawResult;
  readonly status: RunStatus;
  readonly exitCode: number;
  readonly signal: number;
  readonly reason: string;
  readonly stdout: string;
  readonly stderr: string;
  readonly stdoutBytes: number;
  readonly stderrBytes: number;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly wallMs: number;
  readonly cpuMs: number;
  readonly peakMemoryBytes: number;
  readonly changedFiles: { path: string; path_encoded?: string; size: number }[];
  readonly repl: Record<string, unknown> | null;
  readonly ok: boolean;
}

export interface FileEntry {
  name: string;
  path: string;
  /** Only for a name that is not UTF-8 (shown with U+FFFD in name and path): the path's bytes, percent-encoded. */
  path_encoded?: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
}

/**
 * A file: a path (relative to /workspace or absolute under it), or an entry of list() or of a result's changedFiles,
 * whose path_encoded (a name that is not UTF-8) is sent back unchanged.
 */
export type FilePath = string | { path?: string; path_encoded?: string };

/** The entries of a directory; `truncated` (not enumerable) is true when the server listed only some of them. */
export interface FileListing extends Array<FileEntry> {
  readonly truncated: boolean;
}

export declare class Files {
  write(path: FilePath, data: string | ArrayBufferView | ArrayBuffer,
    opts?: { signal?: AbortSignal }): Promise<{ path: string; size: number }>;
  read(path: FilePath, opts?: { signal?: AbortSignal }): Promise<Buffer>;
  readText(path: FilePath, opts?: { signal?: AbortSignal }): Promise<string>;
  list(path?: FilePath, opts?: { signal?: AbortSignal }): Promise<FileListing>;
  remove(path: FilePath, opts?: { signal?: AbortSignal }): Promise<void>;
}

export declare class Sandbox {
  static create(opts?: CreateOptions): Promise<Sandbox>;
  static connect(id: string, opts?: ConnectOptions): Promise<Sandbox>;
  static list(opts?: ConnectOptions): Promise<Sandbox[]>;
  static run(opts: CreateOptions & RunCodeOptions & { cmd?: string | string[]; code?: string }): Promise<ExecResult>;
  readonly id: string;
  info: SandboxInfo;
  readonly files: Files;
  readonly url: string;
  refresh(opts?: { signal?: AbortSignal }): Promise<SandboxInfo>;
  exec(cmd: string | string[], opts?: ExecOptions): Promise<ExecResult>;
  runCode(code: string, opts?: RunCodeOptions): Promise<ExecResult>;
  terminate(opts?: { signal?: AbortSignal }): Promise<void>;
  /** terminate(), for `await using sbx = await Sandbox.create()` (needs Symbol.asyncDispose: @types/node 20 or
   * lib esnext.disposable). */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface ErrorInit {
  status?: number | null;
  code?: string | null;
  body?: Record<string, unknown> | null;
  url?: string | null;
  requestSent?: boolean;
  cause?: unknown;
}

export declare class NsboxError extends Error {
  constructor(message: string, init?: ErrorInit);
  readonly status: number | null;
  readonly code: string | null;
  readonly body: Record<string, unknown> | null;
  readonly url: string | null;
  readonly requestSent: boolean;
}
export declare class NotFoundError extends NsboxError {}
export declare class RefusedError extends NsboxError {}
export declare class CapacityFullError extends RefusedError {
  readonly capacity: Record<string, unknown> | null;
}
export declare class ConflictError extends NsboxError {}
export declare class SetupFailedError extends NsboxError {}
/** 500 internal (or any 500 but setup_failed): a fault of the server itself. */
export declare class InternalError extends NsboxError {}
export declare class ServerGoneError extends NsboxError {}
export declare class RequestTimeoutError extends NsboxError {}

export declare class Transport {
  constructor(url: string, opts?: { token?: string; requestTimeoutMs?: number; maxResponseBytes?: number });
  readonly url: string;
  readonly maxResponseBytes: number;
  request(method: string, path: string, opts?: Record<string, unknown>): Promise<unknown>;
}
export declare function endpointUrls(url?: string | string[]): string[];
export declare function defaultSocket(): string;

export declare const DEFAULT_OUTPUT_LIMIT: number;
export declare function clip(text: string, opts?: { limit?: number; name?: string }): string;
export declare function formatToolOutput(result: ExecResult | RawResult, opts?: { limit?: number }): string;

export interface RunPythonOptions {
  /** The program's time-out in seconds (default 60). */
  timeout?: number;
  /** Characters of stdout and stderr the model gets (default 16000). */
  outputLimit?: number;
  signal?: AbortSignal;
  description?: string;
  /** Any schema the AI SDK accepts (a zod schema, jsonSchema(...)); default a Standard JSON Schema. */
  inputSchema?: unknown;
}
export interface RunPythonTool {
  description: string;
  inputSchema: any;
  execute: (input: { code: string }, options?: { abortSignal?: AbortSignal }) => Promise<string>;
}
export declare function runPythonTool(sbx: Sandbox, opts?: RunPythonOptions): RunPythonTool;
export declare function runPython(sbx: Sandbox, code: string, opts?: RunPythonOptions): Promise<string>;
export declare const runPythonInputSchema: unknown;
export declare const RUN_PYTHON_JSON_SCHEMA: {
  type: 'object';
  properties: { code: { type: 'string'; description: string } };
  required: ['code'];
  additionalProperties: false;
};
