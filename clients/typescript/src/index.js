// clients/typescript/src/index.js: the package's entry point: what `import ... from 'nsbox'` gives.
export { Sandbox, Files, ExecResult } from './sandbox.js';
export { Transport, endpointUrls, defaultSocket } from './transport.js';
export { clip, formatToolOutput, DEFAULT_OUTPUT_LIMIT } from './clip.js';
export { runPythonTool, runPython, runPythonInputSchema, RUN_PYTHON_JSON_SCHEMA } from './ai.js';
export {
  NsboxError, NotFoundError, RefusedError, CapacityFullError, ConflictError, SetupFailedError, InternalError,
  ServerGoneError, RequestTimeoutError,
} from './errors.js';
