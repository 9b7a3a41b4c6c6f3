// clients/typescript/src/clip.js: head-and-tail clipping of program output for a model, and the tool-output text.

export const DEFAULT_OUTPUT_LIMIT = 16_000; // characters a model sees of one call's stdout and stderr together

/** Keeps the head and the tail of `text` within `limit` characters, with a marker saying how much was cut. */
export function clip(text, { limit = DEFAULT_OUTPUT_LIMIT, name = 'output' } = {}) {
  text = String(text ?? '');
  if (text.length <= limit) return text;
  const tailSize = Math.floor(limit / 2);
  let head = text.slice(0, limit - tailSize);
  let tail = text.slice(text.length - tailSize);
  // Cut at a line boundary when one is near, so the model sees whole lines.
  const nl = head.lastIndexOf('\n');
  if (nl >= 0 && nl + 1 >= head.length / 2) head = head.slice(0, nl + 1);
  const tnl = tail.indexOf('\n');
  if (tnl >= 0 && tnl + 1 <= tail.length / 2 && tnl + 1 < tail.length) tail = tail.slice(tnl + 1);
  const cut = text.length - head.length - tail.length;
  return `${head}${head.endsWith('\n') ? '' : '\n'}[... ${cut} characters of ${name} cut here: kept the first ` +
    `${head.length} and the last ${tail.length} of ${text.length} ...]\n${tail}`;
}

/** The text a model gets for a run: exit_code, a status line when it did not simply exit, stdout and stderr. */
export function formatToolOutput(result, { limit = DEFAULT_OUTPUT_LIMIT } = {}) {
  const r = result.raw ?? result;
  const exitCode = r.status === 'timeout' ? 124 : r.signal ? 128 + r.signal : r.exit_code;
  let out = `exit_code: ${exitCode}\n`;
  if (r.status !== 'ok' && r.status !== 'exit') out += `status: ${r.status} (${r.reason ?? ''})\n`;
  const so = r.stdout ?? '';
  const se = r.stderr ?? '';
  let soLimit = so.length;
  let seLimit = se.length;
  if (so.length + se.length > limit) {
    const half = Math.floor(limit / 2);
    if (se.length <= half) soLimit = limit - se.length;
    else if (so.length <= half) seLimit = limit - so.length;
    else [soLimit, seLimit] = [limit - half, half];
  }
  for (const [name, data, lim] of [['stdout', so, soLimit], ['stderr', se, seLimit]]) {
    if (!data) {
      out += `${name}: (empty)\n`;
      continue;
    }
    const text = clip(data, { limit: lim, name });
    out += `${name}:\n${text}${text.endsWith('\n') ? '' : '\n'}`;
  }
  return out;
}
