// clients/typescript/src/cluster.js: placement over several nodes: ask each /v1/capacity, create on the freest.
// A create or a one-shot run goes to the next node when one is full (429), shutting down (503) or gone before
// anything was sent; any other refusal would be refused everywhere and is thrown at once. An exec is never here:
// it always goes to its sandbox's node and is never retried.
import { CapacityFullError, NsboxError, RequestTimeoutError, ServerGoneError } from './errors.js';

export const CAPACITY_TIMEOUT_MS = 5_000;

const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);

// The smaller of two figures a node may or may not give.
const least = (a, b) => (a === null ? b : b === null ? a : Math.min(a, b));
const freeSlots = (boxes) => {
  const max = num(boxes?.max);
  return max === null ? null : max - (num(boxes?.running) ?? 0);
};

/** How attractive a node is, compared element by element, largest first; null for a node that did not answer.
 *  Each figure is the smaller of the server's and this client's own share of it ("client"), which a create must
 *  fit too. */
export function score(capacity, template) {
  if (!capacity || typeof capacity !== 'object') return null;
  const own = capacity.client ?? {};
  const slots = least(freeSlots(capacity.sandboxes), freeSlots(own.sandboxes)) ?? Infinity;
  const memory = least(num(capacity.memory_bytes?.free), num(own.memory_bytes?.free));
  const pids = least(num(capacity.pids?.free), num(own.pids?.free));
  const ready = num(capacity.pool?.[template ?? 'host']?.ready) ?? 0;
  const room = slots > 0 && (memory === null || memory > 0) && (pids === null || pids > 0);
  return [room ? 1 : 0, slots, memory ?? 0, ready];
}

function compare(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return b[i] - a[i];
  return 0;
}

/** The transports in the order to try: freest first (equal ones shuffled), the silent ones last. */
export async function order(transports, template) {
  const caps = await Promise.all(transports.map((t) =>
    t.request('GET', '/v1/capacity', { timeoutMs: CAPACITY_TIMEOUT_MS }).catch(() => null)));
  const ranked = transports.map((t, i) => ({ t, s: score(caps[i], template), r: Math.random() }));
  const answered = ranked.filter((x) => x.s).sort((a, b) => compare(a.s, b.s) || a.r - b.r);
  return [...answered, ...ranked.filter((x) => !x.s)].map((x) => x.t);
}

function retryable(err, sentMatters) {
  if (err instanceof CapacityFullError) return true;
  if (err instanceof ServerGoneError && err.status === 503) return true;
  if (err instanceof ServerGoneError || err instanceof RequestTimeoutError) return !sentMatters || !err.requestSent;
  return false;
}

/** Runs attempt(transport) on each node in order until one answers. Returns [transport, answer]. */
export async function tryEach(transports, template, attempt, sentMatters) {
  const failures = [];
  for (const t of transports.length > 1 ? await order(transports, template) : transports) {
    try {
      return [t, await attempt(t)];
    } catch (err) {
      if (!(err instanceof NsboxError) || !retryable(err, sentMatters) || transports.length === 1) throw err;
      failures.push(err);
    }
  }
  const last = failures[failures.length - 1];
  const Cls = failures.every((f) => f instanceof CapacityFullError) ? CapacityFullError : last.constructor;
  throw new Cls(`no node could take the request (${failures.map((f) => `${f.url}: ${f.message}`).join('; ')})`,
    { status: last.status, code: last.code, body: last.body, requestSent: failures.some((f) => f.requestSent) });
}
