// tests/containers/kubernetes/validate.mjs: validates deploy/kubernetes offline, without a cluster: the Kubernetes API
// schemas (kubernetes-models: types, required fields, enums, formats), unknown fields (TypeScript's excess-property
// check against the typed structs), the agent-sandbox SandboxTemplate shape, and what the manifests must agree on.
//
//   node validate.mjs DIR              check every *.yaml in DIR; one line per problem, exit 1 if any
//   node validate.mjs --self-test DIR  also check that broken copies are refused (the checks can fail)
//   node validate.mjs --probe DIR      print the DaemonSet's serve arguments and readiness probe as JSON
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import { PodTemplate } from "kubernetes-models/v1/PodTemplate";
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";

const here = path.dirname(fileURLToPath(import.meta.url));

// kind -> [model class, TypeScript type, its module]
const KINDS = {
  "v1/Namespace": [Namespace, "INamespace", "kubernetes-models/v1/Namespace"],
  "v1/Secret": [Secret, "ISecret", "kubernetes-models/v1/Secret"],
  "v1/Service": [Service, "IService", "kubernetes-models/v1/Service"],
  "apps/v1/DaemonSet": [DaemonSet, "IDaemonSet", "kubernetes-models/apps/v1/DaemonSet"],
  "apps/v1/Deployment": [Deployment, "IDeployment", "kubernetes-models/apps/v1/Deployment"],
};
const SANDBOX_TEMPLATE = "extensions.agents.x-k8s.io/v1beta1/SandboxTemplate";

// The SandboxTemplate of agent-sandbox's CRD (k8s/crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml, version
// v1beta1, the storage version, read at commit 2fd412d5): spec's fields, podTemplate required, its metadata only labels
// and annotations, its spec a core PodSpec.
const SANDBOX_TEMPLATE_TS = `
import type { IObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
export interface SandboxTemplate {
  apiVersion: "extensions.agents.x-k8s.io/v1beta1";
  kind: "SandboxTemplate";
  metadata: IObjectMeta;
  spec: {
    envVarsInjectionPolicy?: "Allowed" | "Overrides" | "Disallowed";
    networkPolicy?: { egress?: object[]; ingress?: object[] };
    networkPolicyManagement?: "Managed" | "Unmanaged";
    podTemplate: {
      metadata?: { labels?: { [k: string]: string }; annotations?: { [k: string]: string } };
      spec: IPodSpec;
    };
    service?: boolean;
    volumeClaimTemplates?: object[];
    volumeClaimTemplatesPolicy?: "Disallowed" | "Allowed" | "Overrides";
  };
}
`;

function load(dir) {
  const docs = [];
  const problems = [];
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
    if (file === "kustomization.yaml") continue;
    const text = fs.readFileSync(path.join(dir, file), "utf8");
    for (const doc of parseAllDocuments(text, { uniqueKeys: true })) {
      if (doc.errors.length) problems.push(`${file}: ${doc.errors[0].message}`);
      else if (doc.contents !== null) docs.push({ file, obj: doc.toJS() });
    }
  }
  return { docs, problems };
}

const kindOf = (o) => `${o.apiVersion}/${o.kind}`;

function schemaChecks(docs, problems) {
  for (const { file, obj } of docs) {
    const key = kindOf(obj);
    try {
      if (KINDS[key]) {
        new KINDS[key][0](obj).validate();
      } else if (key === SANDBOX_TEMPLATE) {
        // Its pod as the core API has it: a PodTemplate around spec.podTemplate.
        new PodTemplate({ metadata: { name: obj.metadata?.name }, template: obj.spec?.podTemplate }).validate();
        if (typeof obj.spec?.podTemplate?.spec !== "object") throw new Error("spec.podTemplate.spec is required");
      } else {
        problems.push(`${file}: ${key} is not a kind this check knows`);
      }
    } catch (e) {
      problems.push(`${file}: ${obj.kind} ${obj.metadata?.name}: ${e.message.split("\n").slice(0, 3).join("; ")}`);
    }
  }
}

// Unknown fields: every manifest as a typed constant; tsc's excess-property check refuses a field the struct lacks.
function typeChecks(docs, problems) {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-k8s-"));
  try {
    const lines = [];
    const imports = new Set();
    docs.forEach(({ obj }, i) => {
      const key = kindOf(obj);
      let type;
      if (KINDS[key]) {
        imports.add(`import type { ${KINDS[key][1]} } from "${KINDS[key][2]}";`);
        type = KINDS[key][1];
      } else if (key === SANDBOX_TEMPLATE) {
        imports.add(`import type { SandboxTemplate } from "./sandboxtemplate";`);
        type = "SandboxTemplate";
      } else {
        return;
      }
      lines.push(`// doc ${i}\nexport const doc${i}: ${type} = ${JSON.stringify(obj, null, 1)};`);
    });
    fs.writeFileSync(path.join(work, "sandboxtemplate.ts"), SANDBOX_TEMPLATE_TS);
    fs.writeFileSync(path.join(work, "manifests.ts"), [...imports, ...lines].join("\n") + "\n");
    fs.writeFileSync(path.join(work, "tsconfig.json"), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022",
                         skipLibCheck: true, baseUrl: here, typeRoots: [], paths: { "*": [path.join(here, "node_modules/*")] } },
      files: ["manifests.ts"],
    }));
    fs.symlinkSync(path.join(here, "node_modules"), path.join(work, "node_modules"));
    try {
      execFileSync(process.execPath, [path.join(here, "node_modules/typescript/bin/tsc"), "-p", work],
                   { encoding: "utf8", stdio: "pipe" });
    } catch (e) {
      const out = (e.stdout || "") + (e.stderr || "");
      const source = fs.readFileSync(path.join(work, "manifests.ts"), "utf8").split("\n");
      for (const line of out.split("\n").filter((l) => l.includes("error TS"))) {
        // Name the manifest the error is in: the nearest "// doc N" above the line tsc names.
        const m = line.match(/manifests\.ts\((\d+),/);
        let doc = "?";
        if (m) for (let l = Number(m[1]) - 1; l >= 0; l--) if (source[l].startsWith("// doc ")) { doc = source[l].slice(7); break; }
        const d = docs[Number(doc)];
        problems.push(`${d ? d.file + ": " + d.obj.kind : "manifests"}: ${line.replace(/^.*error /, "")}`);
      }
      if (!out.includes("error TS")) problems.push(`tsc failed: ${out.slice(0, 300)}`);
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

// Quantities as the API writes them: Mi, Gi, m (milli-cores) and plain numbers.
function quantity(q) {
  const m = String(q).match(/^([0-9.]+)(Ki|Mi|Gi|m)?$/);
  if (!m) throw new Error(`quantity ${q}`);
  const f = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, m: 1e-3, undefined: 1 }[m[2]];
  return Number(m[1]) * f;
}
// nsbox's own sizes (--memory-budget): K, M, G, T, all binary.
function nsboxSize(q) {
  const m = String(q).match(/^([0-9.]+)([KMGT])?$/);
  if (!m) throw new Error(`nsbox size ${q} (nsbox takes K, M, G or T)`);
  return Number(m[1]) * 1024 ** " KMGT".indexOf(m[2] || " ");
}
const arg = (c, name) => (c.args || []).find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const equal = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// What the manifests must agree on, and the sizing formula of daemonset.yaml.
function consistencyChecks(docs, problems) {
  const find = (kind) => docs.filter((d) => d.obj.kind === kind);
  const pods = [...find("DaemonSet"), ...find("Deployment")].map((d) => ({ ...d, meta: d.obj.metadata, pod: d.obj.spec.template }))
    .concat(find("SandboxTemplate").map((d) => ({ ...d, meta: d.obj.metadata, pod: d.obj.spec.podTemplate })));
  if (find("DaemonSet").length !== 1 || find("Deployment").length !== 1 || find("SandboxTemplate").length !== 1)
    problems.push("expected one DaemonSet, one Deployment and one SandboxTemplate");
  const secret = find("Secret")[0]?.obj;
  for (const { file, meta, pod } of pods) {
    const say = (msg) => problems.push(`${file}: ${msg}`);
    const c = pod?.spec?.containers?.[0];
    if (!c) { say("no pod spec with a container"); continue; }
    const sc = c.securityContext || {};
    if (sc.privileged !== false || sc.procMount !== "Unmasked" || !equal(sc.capabilities, { drop: ["ALL"], add: ["SETUID", "SETGID"] }) ||
        !equal(sc.seccompProfile, { type: "Localhost", localhostProfile: "nsbox.json" }))
      say(`the securityContext is not the least privilege of docs/containers.md: ${JSON.stringify(sc)}`);
    // Sizing: requests and limits from the pool size, the sandbox count and the sandbox memory.
    const a = meta.annotations || {};
    const pool = Number(a["nsbox.dev/pool-size"]), max = Number(a["nsbox.dev/max-sandboxes"]);
    // A sandbox's memory limit and its /workspace (files written through the API are charged to serve).
    const each = quantity(a["nsbox.dev/sandbox-memory"] || "x") + quantity(a["nsbox.dev/sandbox-tmpfs"] || "x");
    const want = { reqMem: 64 * 2 ** 20 + pool * 16 * 2 ** 20, limMem: 64 * 2 ** 20 + max * each, budget: max * each,
                   reqCpu: 0.25 + pool * 0.1 };
    const r = c.resources || {};
    let have;
    try {
      have = { reqMem: quantity(r.requests?.memory), limMem: quantity(r.limits?.memory),
                   budget: nsboxSize(arg(c, "memory-budget")), reqCpu: quantity(r.requests?.cpu) };
    } catch (e) {
      say(`a size it cannot read: ${e.message}`);
      continue;
    }
    for (const k of Object.keys(want)) if (Math.abs(want[k] - have[k]) > 1e-6) say(`${k} is ${have[k]}, the formula gives ${want[k]}`);
    if (arg(c, "pool") !== `host=${pool}`) say(`--pool ${arg(c, "pool")} is not the annotated pool size ${pool}`);
    if (Number(arg(c, "max-sandboxes")) !== max) say(`--max-sandboxes is not the annotated ${max}`);
    if (r.limits?.cpu) say("a CPU limit throttles every sandbox together; each has its own quota");
    // Probes on the API port: readiness asks /v1/readyz (503 while the pool cannot make a sandbox), liveness
    // /v1/healthz.
    for (const [probe, wanted] of [[c.readinessProbe, "/v1/readyz"], [c.livenessProbe, "/v1/healthz"]])
      if (!probe?.httpGet || probe.httpGet.path !== wanted || probe.httpGet.port !== "api")
        say(`a probe does not GET ${wanted} on the port named api`);
    // The token: the Secret's key, mounted where --token-file points.
    const vol = pod.spec.volumes.find((v) => v.secret);
    const mount = c.volumeMounts.find((m) => m.name === vol?.name);
    const key = path.basename(arg(c, "token-file") || "");
    if (!secret || vol?.secret?.secretName !== secret.metadata.name || mount?.mountPath !== path.dirname(arg(c, "token-file")) ||
        !(key in (secret.stringData || secret.data || {})))
      say("--token-file is not the Secret's key where the Secret is mounted");
    if (!c.ports?.some((p) => p.name === "api" && arg(c, "listen") === `0.0.0.0:${p.containerPort}`))
      say("the port named api is not serve's --listen port");
  }
  // The Deployment's pod is the DaemonSet's, but for its placement.
  const [ds, dep] = [find("DaemonSet")[0]?.obj.spec.template.spec, find("Deployment")[0]?.obj.spec.template.spec];
  if (ds && dep && (!equal(ds.containers, dep.containers) || !equal(ds.volumes, dep.volumes)))
    problems.push("deployment.yaml: its containers or volumes differ from daemonset.yaml's");
  for (const svc of find("Service")) {
    const labels = find("DaemonSet")[0]?.obj.spec.template.metadata.labels || {};
    for (const [k, v] of Object.entries(svc.obj.spec.selector || {}))
      if (labels[k] !== v) problems.push(`${svc.file}: Service ${svc.obj.metadata.name} selects ${k}=${v}, which the pods lack`);
    for (const p of svc.obj.spec.ports)
      if (!find("DaemonSet")[0]?.obj.spec.template.spec.containers[0].ports.some((cp) => cp.name === p.targetPort))
        problems.push(`${svc.file}: targetPort ${p.targetPort} is no port of the pod`);
  }
}

function check(dir) {
  const { docs, problems } = load(dir);
  schemaChecks(docs, problems);
  typeChecks(docs, problems);
  consistencyChecks(docs, problems);
  return { docs, problems };
}

// Broken copies that each check must refuse: a misspelt field, a wrong type, a missing required field, a wrong size.
function selfTest(dir) {
  const breakages = [
    ["daemonset.yaml", "          procMount: Unmasked", "          procMount: Unmasked\n          privilged: true", /privilged/],
    ["daemonset.yaml", "          containerPort: 8080", "          containerPort: \"8080\"", /containerPort/],
    ["service.yaml", "    targetPort: api\n    protocol: TCP\n---", "    protocol: TCP\n---", null],
    ["sandboxtemplate.yaml", "  service: true", "  service: true\n  replicas: 2", /replicas/],
    ["sandboxtemplate.yaml", "    spec:\n      automountServiceAccountToken", "    specs:\n      automountServiceAccountToken", /spec/],
    ["deployment.yaml", "            memory: 6208Mi", "            memory: 4160Mi", /limMem/],
    ["daemonset.yaml", "--memory-budget=6G", "--memory-budget=6Gi", /nsbox size/],
    ["daemonset.yaml", "--memory-budget=6G", "--memory-budget=4G", /budget/],
    ["daemonset.yaml", "            path: /v1/healthz\n", "            path: /healthz\n", /probe/],
    ["daemonset.yaml", "            path: /v1/readyz\n", "            path: /v1/healthz\n", /probe/],
  ];
  const failures = [];
  for (const [file, from, to, pattern] of breakages) {
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), "nsbox-k8s-broken-"));
    try {
      for (const f of fs.readdirSync(dir)) if (f.endsWith(".yaml")) fs.copyFileSync(path.join(dir, f), path.join(copy, f));
      const text = fs.readFileSync(path.join(copy, file), "utf8");
      if (!text.includes(from)) { failures.push(`self-test: ${file} no longer has ${JSON.stringify(from)}`); continue; }
      fs.writeFileSync(path.join(copy, file), text.replace(from, to));
      const { problems } = check(copy);
      if (!problems.length || (pattern && !problems.some((p) => pattern.test(p))))
        failures.push(`self-test: ${file} with ${JSON.stringify(to)} was not refused (${problems.join(" | ") || "no problem found"})`);
      else console.error(`self-test: refused ${file} with ${JSON.stringify(to.trim())}: ${problems[0]}`);
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  }
  return failures;
}

const args = process.argv.slice(2);
const dir = args[args.length - 1];
if (args[0] === "--probe") {
  const { docs } = load(dir);
  const ds = docs.find((d) => d.obj.kind === "DaemonSet").obj;
  console.log(JSON.stringify({ probe: ds.spec.template.spec.containers[0].readinessProbe.httpGet,
                               args: ds.spec.template.spec.containers[0].args }));
  process.exit(0);
}
const { docs, problems } = check(dir);
if (args[0] === "--self-test") problems.push(...selfTest(dir));
for (const p of problems) console.log(p);
console.error(`validate.mjs: ${docs.length} objects in ${dir}: ${problems.length ? problems.length + " problems" : "valid"}`);
process.exit(problems.length ? 1 : 0);
