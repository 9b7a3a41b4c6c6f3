// clients/typescript/src/ai.js: the run_python tool for the Vercel AI SDK (and its JSON schema for other SDKs).
// No import of `ai`: a tool is a plain {description, inputSchema, execute} object (what `tool()` returns), and
// the input schema is a Standard JSON Schema object, which the AI SDK (>= 6) reads without zod.
import { formatToolOutput, DEFAULT_OUTPUT_LIMIT } from './clip.js';

export const RUN_PYTHON_DESCRIPTION = 'Runs a Python 3 program in an isolated sandbox and returns its real exit ' +
  'code, stdout and stderr. Files written under /workspace persist between calls of this conversation. Print ' +
  'what you need to see.';

export const RUN_PYTHON_JSON_SCHEMA = Object.freeze({
  type: 'object',
  properties: { code: { type: 'string', description: 'The complete Python program to run.' } },
  required: ['code'],
  additionalProperties: false,
});

function validateInput(value) {
  if (value && typeof value === 'object' && typeof value.code === 'string') return { value: { code: value.code } };
  return { issues: [{ message: 'run_python needs a string "code" argument', path: ['code'] }] };
}

/** The run_python input schema as a Standard Schema (with JSON Schema), as the AI SDK accepts. */
export const runPythonInputSchema = Object.freeze({
  '~standard': {
    version: 1,
    vendor: 'nsbox',
    validate: validateInput,
    // A fresh copy each time: the AI SDK amends the schema it is given.
    jsonSchema: {
      input: () => structuredClone(RUN_PYTHON_JSON_SCHEMA),
      output: () => structuredClone(RUN_PYTHON_JSON_SCHEMA),
    },
  },
});

/**
 * Runs one tool call and answers the model's text. The code goes with its exec (the server hands it to python3 in a
 * sealed file of its own), never through a file of the workspace: the AI SDK runs a step's tool calls at once, and
 * calls sharing a file would run each other's code. Options: timeout (seconds, default 60), outputLimit
 * (characters, default 16000), signal.
 */
export async function runPython(sbx, code, opts = {}) {
  const result = await sbx.runCode(code, { language: 'python', timeout: opts.timeout ?? 60, signal: opts.signal });
  return formatToolOutput(result, { limit: opts.outputLimit ?? DEFAULT_OUTPUT_LIMIT });
}

/** A ready `run_python` tool for the AI SDK's generateText/streamText `tools`. */
export function runPythonTool(sbx, opts = {}) {
  return {
    description: opts.description ?? RUN_PYTHON_DESCRIPTION,
    inputSchema: opts.inputSchema ?? runPythonInputSchema,
    execute: async ({ code }, callOptions) =>
      runPython(sbx, code, { ...opts, signal: callOptions?.abortSignal ?? opts.signal }),
  };
}
