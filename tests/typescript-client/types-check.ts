// tests/typescript-client/types-check.ts: compiled with tsc --noEmit: the package's .d.ts fit how it is used.
import { Sandbox, NotFoundError, ExecResult, clip, runPythonTool } from 'nsbox';
import { runPython } from 'nsbox/ai';

export async function use(): Promise<string> {
  const sbx: Sandbox = await Sandbox.create({ template: 'python', network: 'none', limits: { memory: '256M' } });
  try {
    await sbx.files.write('a.txt', new Uint8Array([1, 2, 3]));
    const bytes: Buffer = await sbx.files.read('a.txt');
    const r: ExecResult = await sbx.exec('ls', { timeout: 5, onStdout: (c: string) => void c });
    const code = await sbx.runCode('print(1)', { language: 'python' });
    const tool = runPythonTool(sbx, { outputLimit: 1000 });
    const text: string = await tool.execute({ code: 'print(1)' });
    return clip(r.stdout + code.stderr + text + bytes.length + (await runPython(sbx, 'print(2)')));
  } catch (err) {
    if (err instanceof NotFoundError) return err.code ?? '';
    throw err;
  } finally {
    await sbx.terminate();
  }
}
