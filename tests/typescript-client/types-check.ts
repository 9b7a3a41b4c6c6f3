// tests/typescript-client/types-check.ts: compiled with tsc --noEmit: the package's .d.ts fit how it is used.
import { Sandbox, NotFoundError, InternalError, ExecResult, FileListing, clip, runPythonTool } from 'nsbox';
import { runPython } from 'nsbox/ai';

export async function use(): Promise<string> {
  const sbx: Sandbox = await Sandbox.create({ template: 'python', network: 'none', limits: { memory: '256M' } });
  try {
    await sbx.files.write('a.txt', new Uint8Array([1, 2, 3]));
    const bytes: Buffer = await sbx.files.read('a.txt');
    const listing: FileListing = await sbx.files.list('.');
    const again: Buffer = await sbx.files.read(listing[0]);
    await sbx.files.remove(listing.truncated ? 'a.txt' : listing[0]);
    const r: ExecResult = await sbx.exec('ls', { timeout: 5, onStdout: (c: string) => void c });
    const code = await sbx.runCode('print(1)', { language: 'python' });
    const tool = runPythonTool(sbx, { outputLimit: 1000 });
    const text: string = await tool.execute({ code: 'print(1)' });
    return clip(r.stdout + code.stderr + text + bytes.length + again.length + (await runPython(sbx, 'print(2)')));
  } catch (err) {
    if (err instanceof NotFoundError) return err.code ?? '';
    if (err instanceof InternalError) return err.message;
    throw err;
  } finally {
    await sbx.terminate();
  }
}

// `await using`, as the README offers it: the sandbox is terminated when the block ends, thrown out of or not.
export async function disposed(): Promise<string> {
  await using sbx = await Sandbox.create();
  return (await sbx.exec('true')).status;
}
