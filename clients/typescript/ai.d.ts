// clients/typescript/ai.d.ts: the types of `nsbox/ai` (the run_python tool for the AI SDK).
export { runPythonTool, runPython, runPythonInputSchema, RUN_PYTHON_JSON_SCHEMA } from './index.js';
export type { RunPythonOptions, RunPythonTool } from './index.js';
