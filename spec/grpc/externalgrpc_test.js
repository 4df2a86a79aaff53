// The externalgrpc CloudProvider service (docs/bizfly.md) of a real `luaprov run --sim --grpc-addr`,
// asked by an independent client: @grpc/grpc-js with @grpc/proto-loader reading engine/grpc/externalgrpc.proto,
// as the Cluster Autoscaler's Go client would, over h2c and mTLS. The engine's Bizfly mapping talks to
// the in-process Bizfly simulator, whose admin paths (/_sim/...) inject faults and show what the cloud
// saw. Checks every RPC's success path, every NodeGroup rule (NG1-NG6, docs/contracts.md), the
// UNIMPLEMENTED answers (and GetOptions and pricing from an operator mapping that supplies them),
// deadlines, 100 concurrent calls, malformed request bytes, the template Node's bytes (decoded with
// k8s_core.proto, in both the CA >= 1.35 and the legacy <= 1.34 field) and a clean SIGTERM exit.
//
//   LUAPROV=build/luaprov node spec/grpc/externalgrpc_test.js
'use strict';

process.noDeprecation = true; // grpc-js sets the TLS ServerName to an IP, as the CA's Go client does

const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

let grpc, protoLoader, protobuf;
try {
  grpc = require('@grpc/grpc-js');
  protoLoader = require('@grpc/proto-loader');
  protobuf = require('protobufjs'); // proto-loader's own dependency: decodes the template Node
} catch (e) {
  console.error('externalgrpc_test: run `npm ci --prefix spec/grpc` first (' + e.message + ')');
  process.exit(1);
}

const LUAPROV = process.env.LUAPROV;
if (!LUAPROV) {
  console.error('externalgrpc_test: set LUAPROV to the luaprov binary');
  process.exit(1);
}

const PROTO_DIR = path.join(__dirname, '..', '..', 'engine', 'grpc');
const SERVICE = '/clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/';
const definition = protoLoader.loadSync('externalgrpc.proto', {
  keepCase: true,
  defaults: true,
  enums: String,
  includeDirs: [PROTO_DIR],
});
const CloudProvider = grpc.loadPackageDefinition(definition).clusterautoscaler.cloudprovider.v1.externalgrpc
  .CloudProvider;

const k8s = new protobuf.Root();
k8s.resolvePath = (origin, target) => path.join(PROTO_DIR, target);
k8s.loadSync('k8s_core.proto');
const Node = k8s.lookupType('k8s.io.api.core.v1.Node');
// What a CA <= 1.34 client decodes: the template as an embedded v1.Node in field 1.
const LegacyTemplate = new protobuf.Type('LegacyTemplate').add(
  new protobuf.Field('nodeInfo', 1, 'k8s.io.api.core.v1.Node'),
);
k8s.add(LegacyTemplate);

// The simulated cluster (sim/bizfly/fixture.lua): three autoscaled pools, two that are not.
const GENERAL = '66a0f1c2b3d4e5f601a2b3c4'; // min 1, max 5, target 2, 2 nodes
const GPU = '66a0f1c2b3d4e5f601a2b3c6'; // min 0, max 4, target 1, 1 node, tainted
const BATCH = '66a0f1c2b3d4e5f601a2b3c7'; // min 0, max 10, target 0
const SYSTEM = '66a0f1c2b3d4e5f601a2b3c5'; // autoscaling disabled: not a node group

// ---- the engine ---------------------------------------------------------------------------------

function startEngine(args = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(
      LUAPROV,
      ['run', '--sim', '--grpc-addr', '127.0.0.1:0', '--metrics-addr', '127.0.0.1:0', '--log-format', 'json', ...args],
      { stdio: ['ignore', 'inherit', 'pipe'] },
    );
    const engine = { proc, logs: [] };
    engine.exited = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
    proc.on('error', reject);
    readline.createInterface({ input: proc.stderr }).on('line', (line) => {
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        process.stderr.write(line + '\n'); // a sanitizer report
        return;
      }
      engine.logs.push(entry);
      if (entry.msg === 'engine started') {
        engine.addr = entry.grpc_addr;
        engine.metrics = 'http://' + entry.metrics_addr;
        engine.sim = entry.sim.bizfly;
        resolve(engine);
      }
    });
    engine.exited.then(({ code }) => reject(new Error('luaprov run exited early with ' + code)));
  });
}

async function stopEngine(engine) {
  // once: a second SIGTERM could land after the engine closed its signal handlers and kill it
  if (!engine.proc.killed) engine.proc.kill('SIGTERM');
  const timeout = new Promise((res) => setTimeout(() => res('timeout'), 15000));
  const result = await Promise.race([engine.exited, timeout]);
  assert.notEqual(result, 'timeout', 'luaprov run did not exit after SIGTERM');
  assert.deepEqual(result, { code: 0, signal: null }, 'luaprov run exit status');
}

async function admin(engine, method, adminPath, body) {
  const res = await fetch(engine.sim + adminPath, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const value = await res.json();
  assert.ok(res.ok, `${method} ${adminPath}: ${res.status} ${JSON.stringify(value)}`);
  return value;
}

async function metric(engine, series) {
  const text = await (await fetch(engine.metrics + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.split(' ')[1]) : 0;
}

// ---- calls --------------------------------------------------------------------------------------

function call(client, method, request = {}, ms = 10000) {
  return new Promise((resolve) => {
    client[method](request, { deadline: new Date(Date.now() + ms) }, (err, reply) => resolve({ err, reply }));
  });
}

async function ok(client, method, request, ms) {
  const { err, reply } = await call(client, method, request, ms);
  assert.ifError(err);
  return reply;
}

async function fails(client, method, request, code, message) {
  const { err } = await call(client, method, request);
  assert.ok(err, `${method} ${JSON.stringify(request)} should fail with ${code}`);
  assert.equal(err.code, code, `${method}: ${err.details}`);
  if (message instanceof RegExp) assert.match(err.details, message);
  else if (message !== undefined) assert.equal(err.details, message);
  return err;
}

// The same method with raw request bytes and the raw response bytes: what no generated client sends.
function rawCall(client, method, bytes, ms = 5000) {
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      SERVICE + method,
      (b) => b,
      (b) => b,
      bytes,
      new grpc.Metadata(),
      { deadline: new Date(Date.now() + ms) },
      (err, reply) => resolve({ err, reply }),
    );
  });
}

// Back to the fixture, and a snapshot taken of it.
async function fresh(engine, client) {
  await admin(engine, 'POST', '/_sim/reset');
  await ok(client, 'Refresh');
}

const fakeNode = (providerID) => ({ providerID, name: providerID, labels: {}, annotations: {} });

async function instances(client, id) {
  return (await ok(client, 'NodeGroupNodes', { id })).instances;
}

async function simPool(engine, id) {
  const state = await admin(engine, 'GET', '/_sim/state');
  return { pool: state.cluster.pools.find((p) => p.id === id), calls: state.calls };
}

// ---- tests --------------------------------------------------------------------------------------

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('every RPC answers from the simulated Bizfly cluster', async ({ engine, client }) => {
  await fresh(engine, client);
  const groups = (await ok(client, 'NodeGroups')).nodeGroups;
  assert.deepEqual(
    groups.map((g) => [g.id, g.minSize, g.maxSize]),
    [[GENERAL, 1, 5], [GPU, 0, 4], [BATCH, 0, 10]],
  );
  assert.ok(groups.every((g) => g.debug.length > 0));
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: GENERAL })).targetSize, 2);
  const general = await instances(client, GENERAL);
  assert.equal(general.length, 2);
  for (const i of general) {
    assert.match(i.id, /^bizflycloud:\/\/[0-9a-f-]{36}$/);
    assert.equal(i.status.instanceState, 'instanceRunning');
    assert.equal(i.status.errorInfo, null); // no error: no errorInfo at all
  }
  // NodeGroupForNode by providerID, labels or not
  const owner = await ok(client, 'NodeGroupForNode', { node: fakeNode(general[0].id) });
  assert.deepEqual([owner.nodeGroup.id, owner.nodeGroup.minSize, owner.nodeGroup.maxSize], [GENERAL, 1, 5]);
  assert.equal((await ok(client, 'GPULabel')).label, 'bke.bizflycloud.vn/gpu-node');
  assert.deepEqual((await ok(client, 'GetAvailableGPUTypes')).gpuTypes, {});
  await ok(client, 'Cleanup');
  await ok(client, 'Refresh');
  // size changes and deletions reach the cloud
  await ok(client, 'NodeGroupIncreaseSize', { id: BATCH, delta: 3 });
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: BATCH })).targetSize, 3);
  assert.equal((await simPool(engine, BATCH)).pool.desired_size, 3);
  await ok(client, 'NodeGroupDecreaseTargetSize', { id: BATCH, delta: -3 }); // nothing launched in the snapshot yet
  assert.equal((await simPool(engine, BATCH)).pool.desired_size, 0);
  await ok(client, 'NodeGroupDeleteNodes', { id: GENERAL, nodes: [fakeNode(general[1].id)] });
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: GENERAL })).targetSize, 1);
  const after = await simPool(engine, GENERAL);
  assert.equal(after.pool.desired_size, 1);
  assert.equal(after.calls.delete_node, 1);
});

test('the template Node: nodeBytes and the legacy nodeInfo decode as the same v1.Node', async ({ engine, client }) => {
  await fresh(engine, client);
  const { err, reply } = await rawCall(client, 'NodeGroupTemplateNodeInfo', Buffer.from([0x0a, GPU.length, ...Buffer.from(GPU)]));
  assert.ifError(err);
  const current = await ok(client, 'NodeGroupTemplateNodeInfo', { id: GPU });
  assert.ok(current.nodeBytes.length > 0);
  const node = Node.toObject(Node.decode(current.nodeBytes), { defaults: false });
  const legacy = LegacyTemplate.toObject(LegacyTemplate.decode(reply), { defaults: false }).nodeInfo;
  assert.deepEqual(legacy, node);
  assert.equal(node.metadata.name, 'template-' + GPU);
  assert.equal(node.metadata.labels['kubernetes.io/os'], 'linux');
  assert.equal(node.metadata.labels['kubernetes.io/hostname'], 'template-' + GPU);
  assert.ok(node.metadata.labels['bke.bizflycloud.vn/gpu-node'] !== undefined, 'the GPU label');
  assert.deepEqual(
    node.spec.taints.map((t) => [t.key, t.value, t.effect]),
    [['nvidia.com/gpu', 'present', 'NoSchedule']],
  );
  assert.ok(node.status.capacity.cpu.string && node.status.capacity.memory.string && node.status.capacity.pods.string);
  assert.ok(node.status.allocatable.cpu.string);
  const ready = node.status.conditions.find((c) => c.type === 'Ready');
  assert.equal(ready.status, 'True');
});

test('NodeGroup rules: deltas, bounds, node count, foreign and label-less nodes, unmanaged nodes', async ({
  engine,
  client,
}) => {
  await fresh(engine, client);
  const C = grpc.status;
  await fails(client, 'NodeGroupIncreaseSize', { id: GENERAL, delta: 0 }, C.INVALID_ARGUMENT, 'delta must be positive, have: 0');
  await fails(client, 'NodeGroupIncreaseSize', { id: GENERAL, delta: -2 }, C.INVALID_ARGUMENT, 'delta must be positive, have: -2');
  await fails(client, 'NodeGroupIncreaseSize', { id: GENERAL, delta: 4 }, C.FAILED_PRECONDITION,
    'size increase is too large. current: 2 desired: 6 max: 5');
  await fails(client, 'NodeGroupIncreaseSize', { id: SYSTEM, delta: 1 }, C.NOT_FOUND, `NodeGroup "${SYSTEM}", not found`);
  await fails(client, 'NodeGroupDecreaseTargetSize', { id: GENERAL, delta: 1 }, C.INVALID_ARGUMENT, 'delta must be negative, have: 1');
  await fails(client, 'NodeGroupDecreaseTargetSize', { id: GENERAL, delta: 0 }, C.INVALID_ARGUMENT, 'delta must be negative, have: 0');
  await fails(client, 'NodeGroupDecreaseTargetSize', { id: GENERAL, delta: -1 }, C.FAILED_PRECONDITION,
    'attempt to delete existing nodes targetSize:2 delta:-1 existingNodes: 2');
  await fails(client, 'NodeGroupTargetSize', { id: 'no-such-pool' }, C.NOT_FOUND);
  await fails(client, 'NodeGroupNodes', { id: SYSTEM }, C.NOT_FOUND);
  assert.equal((await simPool(engine, GENERAL)).calls.update_pool, undefined, 'nothing reached the cloud');

  // DeleteNodes: a node of another group is refused and nothing is deleted
  const general = await instances(client, GENERAL);
  const gpu = await instances(client, GPU);
  await fails(client, 'NodeGroupDeleteNodes', { id: GENERAL, nodes: [fakeNode(general[0].id), fakeNode(gpu[0].id)] },
    C.FAILED_PRECONDITION, new RegExp(`belongs to node group ${GPU}, not ${GENERAL}`));
  await fails(client, 'NodeGroupDeleteNodes', { id: GENERAL, nodes: [fakeNode('bizflycloud://not-ours')] },
    C.FAILED_PRECONDITION, /is not in node group/);
  assert.equal((await simPool(engine, GENERAL)).calls.delete_node, undefined);
  // a node carrying BKE's node-id label
  const { pool } = await simPool(engine, GPU);
  const labelled = {
    providerID: gpu[0].id,
    name: 'gpu-worker-1',
    labels: { 'bke.bizflycloud.vn/node-id': pool.nodes[0].id },
    annotations: {},
  };
  await ok(client, 'NodeGroupDeleteNodes', { id: GPU, nodes: [labelled] });
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: GPU })).targetSize, 0);
  assert.equal((await simPool(engine, GPU)).pool.desired_size, 0);

  // unmanaged nodes: another pool's, or nobody's
  const system = (await simPool(engine, SYSTEM)).pool.nodes[0];
  for (const providerID of ['bizflycloud://' + system.physical_id, 'bizflycloud://elsewhere', '']) {
    const r = await ok(client, 'NodeGroupForNode', { node: fakeNode(providerID) });
    assert.equal(r.nodeGroup.id, '');
  }
  await fails(client, 'NodeGroupForNode', {}, C.INVALID_ARGUMENT, 'request fields were nil');
});

test('optional RPCs answer UNIMPLEMENTED, never OK with an empty body', async ({ engine, client }) => {
  await fresh(engine, client);
  const C = grpc.status;
  await fails(client, 'PricingNodePrice', { node: fakeNode('bizflycloud://x') }, C.UNIMPLEMENTED, /has no node_price/);
  await fails(client, 'PricingPodPrice', { pod_bytes: Buffer.from([0x0a, 0x00]) }, C.UNIMPLEMENTED, /has no pod_price/);
  await fails(client, 'NodeGroupGetOptions', { id: GENERAL, defaults: {} }, C.UNIMPLEMENTED, /has no get_options/);
  await fails(client, 'NodeGroupGetOptions', { id: GENERAL }, C.INVALID_ARGUMENT, /defaults is required/);
  await fails(client, 'NodeGroupTemplateNodeInfo', { id: SYSTEM }, C.NOT_FOUND);
});

// The autoscaler asks about a group it no longer should (a pool deleted, or its autoscaling turned off):
// every RPC naming it answers NOT_FOUND with the id, the optional ones too, and none reaches the cloud.
test('an unknown node group is NOT_FOUND on every RPC that names one', async ({ engine, client }) => {
  await fresh(engine, client);
  const node = fakeNode('bizflycloud://elsewhere');
  for (const id of [SYSTEM, 'no-such-pool']) {
    const requests = {
      NodeGroupTargetSize: { id },
      NodeGroupIncreaseSize: { id, delta: 1 },
      NodeGroupDeleteNodes: { id, nodes: [node] },
      NodeGroupDecreaseTargetSize: { id, delta: -1 },
      NodeGroupNodes: { id },
      NodeGroupTemplateNodeInfo: { id },
      NodeGroupGetOptions: { id, defaults: {} },
    };
    for (const [method, request] of Object.entries(requests)) {
      await fails(client, method, request, grpc.status.NOT_FOUND, `NodeGroup "${id}", not found`);
    }
  }
  // a node of no group is not an error: the empty NodeGroup, as the autoscaler expects
  assert.equal((await ok(client, 'NodeGroupForNode', { node })).nodeGroup.id, '');
  const { calls } = await simPool(engine, GENERAL);
  assert.equal(calls.update_pool, undefined);
  assert.equal(calls.delete_node, undefined);
});

// An operator's tree whose mapping has no template for the batch pool (NotFound), and one whose
// mapping has no template_node at all: both UNIMPLEMENTED.
test('TemplateNodeInfo without a template is UNIMPLEMENTED', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'luaprov-egrpc-'));
  const mapping = path.join(dir, 'providers', 'bizfly', 'init.lua');
  fs.mkdirSync(path.dirname(mapping), { recursive: true });
  fs.writeFileSync(mapping, `local default = require "defaults.providers.bizfly"
local M = {}
for k, v in pairs(default) do M[k] = v end
function M.template_node(ctx, id)
  if id == "${BATCH}" then return nil, { code = "NotFound", message = "flavor not understood" } end
  return default.template_node(ctx, id)
end
return M
`);
  try {
    for (const variant of ['NotFound', 'absent']) {
      if (variant === 'absent') {
        const text = fs.readFileSync(mapping, 'utf8');
        fs.writeFileSync(mapping, text.replace(/function M.template_node[^]*?\nend\n/, 'M.template_node = nil\n'));
      }
      const engine = await startEngine(['--scripts', dir]);
      const client = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
      try {
        const err = await fails(client, 'NodeGroupTemplateNodeInfo', { id: BATCH }, grpc.status.UNIMPLEMENTED);
        assert.match(err.details, variant === 'NotFound' ? /flavor not understood/ : /has no template_node/);
        const gpu = await call(client, 'NodeGroupTemplateNodeInfo', { id: GPU });
        if (variant === 'NotFound') assert.ok(gpu.reply.nodeBytes.length > 0);
        else assert.equal(gpu.err.code, grpc.status.UNIMPLEMENTED);
      } finally {
        client.close();
        await stopEngine(engine);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// An operator's tree that wraps the default mapping and adds the optional get_options, node_price and
// pod_price (docs/contracts.md#mappings): their answers, merged over the client's defaults, and their
// contract.
test('GetOptions and pricing from an operator mapping', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'luaprov-egrpc-'));
  const mapping = path.join(dir, 'providers', 'bizfly', 'init.lua');
  fs.mkdirSync(path.dirname(mapping), { recursive: true });
  fs.writeFileSync(mapping, `local default = require "defaults.providers.bizfly"
local M = {}
for k, v in pairs(default) do M[k] = v end
function M.get_options(_ctx, id, defaults)
  if id == "${BATCH}" then return nil end
  if id == "${GPU}" then return { scale_down_gpu_utilization_threshold = 2 } end
  return { scale_down_utilization_threshold = 0.25, scale_down_unneeded_time = 90,
           max_node_provision_time = defaults.max_node_provision_time * 2, zero_or_max_node_scaling = true }
end
local WANT = "2026-01-02T03:00:00Z/2026-01-02T04:00:00Z"
function M.node_price(_ctx, node, start_time, end_time)
  if start_time .. "/" .. end_time ~= WANT then
    return nil, { code = "InvalidArgument", message = start_time .. "/" .. end_time }
  end
  if node.name == "bad" then return -1 end
  if node.labels["node.kubernetes.io/instance-type"] == "nix.2c_2g" then return 0.5 end
  return nil
end
function M.pod_price(_ctx, pod, _start_time, _end_time)
  if pod.name == "bad" then return -0.5 end
  if pod.namespace ~= "shop" or #pod.containers ~= 2 then
    return nil, { code = "InvalidArgument", message = "pod seen as " .. pod.namespace }
  end
  return pod.requests.cpu + pod.requests.memory / 2 ^ 30
end
return M
`);
  const engine = await startEngine(['--scripts', dir]);
  const client = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
  const C = grpc.status;
  try {
    await ok(client, 'Refresh');
    const defaults = {
      scaleDownUtilizationThreshold: 0.5,
      scaleDownGpuUtilizationThreshold: 0.5,
      scaleDownUnneededDuration: { seconds: 600 },
      scaleDownUnreadyDuration: { seconds: 1200 },
      MaxNodeProvisionDuration: { seconds: 900 },
    };
    const got = (await ok(client, 'NodeGroupGetOptions', { id: GENERAL, defaults })).nodeGroupAutoscalingOptions;
    assert.equal(got.scaleDownUtilizationThreshold, 0.25);
    assert.equal(got.scaleDownGpuUtilizationThreshold, 0.5);
    assert.equal(got.zeroOrMaxNodeScaling, true);
    assert.equal(got.ignoreDaemonSetsUtilization, false);
    assert.equal(String(got.scaleDownUnneededDuration.seconds), '90');
    assert.equal(String(got.scaleDownUnreadyDuration.seconds), '1200');
    assert.equal(String(got.MaxNodeProvisionDuration.seconds), '1800');
    // CA <= 1.34 reads the legacy meta.v1.Duration fields (nanoseconds), always present
    assert.equal(String(got.scaleDownUnneededTime.duration), '90000000000');
    assert.equal(String(got.MaxNodeProvisionTime.duration), '1800000000000');
    // legacy defaults in, the same merge out
    const legacy = { scaleDownUnneededTime: { duration: 60e9 }, MaxNodeProvisionTime: { duration: 300e9 } };
    const old = (await ok(client, 'NodeGroupGetOptions', { id: GENERAL, defaults: legacy }))
      .nodeGroupAutoscalingOptions;
    assert.equal(String(old.MaxNodeProvisionDuration.seconds), '600');
    // without the defaults to merge over, an answer would zero every option CA did not override
    await fails(client, 'NodeGroupGetOptions', { id: GENERAL }, C.INVALID_ARGUMENT,
      `NodeGroupGetOptions: defaults is required (the autoscaler's options for node group ${GENERAL}, which the overrides are merged over)`);
    await fails(client, 'NodeGroupGetOptions', { id: BATCH, defaults }, C.UNIMPLEMENTED, /own options apply/);
    await fails(client, 'NodeGroupGetOptions', { id: 'pool-z', defaults }, C.NOT_FOUND);
    await fails(client, 'NodeGroupGetOptions', { id: GPU, defaults }, C.INTERNAL,
      /^Contract: .*providers\/bizfly\/init\.lua: get_options: .*scale_down_gpu_utilization_threshold must be between 0 and 1, not 2 \(docs\/contracts\.md#mappings\)$/);

    const hour = { startTimestamp: { seconds: 1767322800 }, endTimestamp: { seconds: 1767326400 } };
    const typed = { ...fakeNode('bizflycloud://a'), labels: { 'node.kubernetes.io/instance-type': 'nix.2c_2g' } };
    assert.equal((await ok(client, 'PricingNodePrice', { node: typed, ...hour })).price, 0.5);
    const legacyHour = { startTime: { seconds: 1767322800 }, endTime: { seconds: 1767326400 } };
    assert.equal((await ok(client, 'PricingNodePrice', { node: typed, ...legacyHour })).price, 0.5);
    await fails(client, 'PricingNodePrice', { node: fakeNode('bizflycloud://x'), ...hour }, C.UNIMPLEMENTED,
      /no price for/);
    await fails(client, 'PricingNodePrice', { node: { ...fakeNode('bizflycloud://b'), name: 'bad' }, ...hour },
      C.INTERNAL, /node_price: bad: price -1 is not a finite number >= 0 \(docs\/contracts\.md#mappings\)/);

    const Pod = k8s.lookupType('k8s.io.api.core.v1.Pod');
    const resources = (cpu, memory) => ({ requests: { cpu: { string: cpu }, memory: { string: memory } } });
    const pod = (name) => Buffer.from(Pod.encode(Pod.fromObject({
      metadata: { name, namespace: 'shop', labels: { app: 'web' } },
      spec: {
        containers: [{ name: 'web', resources: resources('500m', '1Gi') }, { name: 'log', resources: resources('100m', '128Mi') }],
        initContainers: [{ name: 'init', resources: resources('2', '64Mi') }],
      },
    })).finish());
    // cpu: the init container's 2 beats the containers' 0.6; memory: 1.125 GiB
    const priced = await ok(client, 'PricingPodPrice', { pod_bytes: pod('web'), ...hour });
    assert.ok(Math.abs(priced.price - 3.125) < 1e-9, String(priced.price));
    assert.ok(Math.abs((await ok(client, 'PricingPodPrice', { pod: pod('web'), ...hour })).price - 3.125) < 1e-9);
    await fails(client, 'PricingPodPrice', { pod_bytes: pod('bad'), ...hour }, C.INTERNAL,
      /pod_price: bad: price -0\.5 is not a finite number >= 0/);
    await fails(client, 'PricingPodPrice', { pod_bytes: Buffer.from([0x0a, 0x05, 0xff]) }, C.INVALID_ARGUMENT,
      /cannot decode the pod/);
  } finally {
    client.close();
    await stopEngine(engine);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('Refresh: a Bizfly failure keeps the snapshot serving', async ({ engine, client }) => {
  await fresh(engine, client);
  const stale = 'luaprov_nodegroup_refresh_total{result="stale"}';
  const before = await metric(engine, stale);
  const fault = await admin(engine, 'POST', '/_sim/faults', { operation: 'get_cluster', kind: 'error', status: 503 });
  await ok(client, 'Refresh');
  assert.equal(await metric(engine, stale), before + 1);
  assert.ok(engine.logs.some((l) => l.msg === 'refresh failed; the last snapshot keeps serving'));
  assert.equal((await ok(client, 'NodeGroups')).nodeGroups.length, 3);
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: GENERAL })).targetSize, 2);
  await admin(engine, 'DELETE', '/_sim/faults/' + fault.added[0].id);
  await ok(client, 'Refresh');
  assert.equal(await metric(engine, stale), before + 1);
});

test('Refresh: a Bizfly failure without a snapshot is an error', async () => {
  const engine = await startEngine();
  const client = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
  try {
    await admin(engine, 'POST', '/_sim/faults', { operation: 'get_cluster', kind: 'error', status: 503 });
    const err = await fails(client, 'Refresh', {}, grpc.status.UNAVAILABLE);
    assert.match(err.details, /refresh failed/);
    await fails(client, 'NodeGroups', {}, grpc.status.UNAVAILABLE);
  } finally {
    client.close();
    await stopEngine(engine);
  }
});

test('deadlines: a slow cloud turns into DEADLINE_EXCEEDED and the engine keeps serving', async ({ engine, client }) => {
  await fresh(engine, client);
  await admin(engine, 'POST', '/_sim/faults', { operation: 'update_pool', kind: 'timeout', seconds: 2, count: 1 });
  const started = Date.now();
  const { err } = await call(client, 'NodeGroupIncreaseSize', { id: BATCH, delta: 1 }, 300);
  assert.equal(err && err.code, grpc.status.DEADLINE_EXCEEDED);
  assert.ok(Date.now() - started < 1500, 'answered at the deadline, not when the cloud answered');
  assert.equal((await ok(client, 'NodeGroups', {}, 1000)).nodeGroups.length, 3);
  await new Promise((res) => setTimeout(res, 2200)); // the slow PATCH lands
  await ok(client, 'Refresh');
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: BATCH })).targetSize, 1);
});

test('100 concurrent calls; concurrent increases of one group never pass its max', async ({ engine, client }) => {
  await fresh(engine, client);
  const reads = [];
  for (let i = 0; i < 100; i++) {
    const m = ['NodeGroupTargetSize', 'NodeGroupNodes', 'NodeGroups', 'NodeGroupForNode'][i % 4];
    reads.push(call(client, m, m === 'NodeGroupForNode' ? { node: fakeNode('bizflycloud://x') } : { id: GENERAL }));
  }
  const answers = await Promise.all(reads);
  for (const a of answers) assert.ifError(a.err);
  assert.ok(answers.filter((a, i) => i % 4 === 0).every((a) => a.reply.targetSize === 2));
  const ups = await Promise.all(
    Array.from({ length: 20 }, () => call(client, 'NodeGroupIncreaseSize', { id: BATCH, delta: 1 })),
  );
  assert.equal(ups.filter((u) => !u.err).length, 10);
  assert.ok(ups.filter((u) => u.err).every((u) => u.err.code === grpc.status.FAILED_PRECONDITION));
  assert.equal((await ok(client, 'NodeGroupTargetSize', { id: BATCH })).targetSize, 10);
  assert.equal((await simPool(engine, BATCH)).pool.desired_size, 10);
});

test('malformed request bytes are INVALID_ARGUMENT on every method', async ({ engine, client }) => {
  await fresh(engine, client);
  const methods = Object.keys(CloudProvider.service);
  assert.equal(methods.length, 15);
  for (const m of methods) {
    for (const bytes of [Buffer.from([0x0a, 0x05, 0x61]), Buffer.from([0xff, 0xff, 0xff])]) {
      const { err } = await rawCall(client, m, bytes);
      assert.equal(err && err.code, grpc.status.INVALID_ARGUMENT, `${m}: ${err && err.details}`);
    }
  }
  assert.equal((await ok(client, 'NodeGroups')).nodeGroups.length, 3); // still serving
});

test('SIGTERM with calls in flight: each gets an answer, the engine exits 0', async () => {
  const engine = await startEngine(['--shutdown-timeout', '0.5']);
  const client = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
  try {
    await ok(client, 'Refresh');
    await admin(engine, 'POST', '/_sim/faults', { operation: 'get_cluster', kind: 'timeout', seconds: 5 });
    const inFlight = call(client, 'Refresh', {}, 10000);
    await new Promise((res) => setTimeout(res, 200));
    engine.proc.kill('SIGTERM');
    const { err } = await inFlight;
    // cancelled at the shutdown deadline: the snapshot keeps answering, or the shutdown is reported
    if (err) assert.equal(err.code, grpc.status.UNAVAILABLE, err.details);
    const late = await call(client, 'NodeGroups', {}, 2000);
    assert.ok(late.err, 'no new calls once shutting down');
  } finally {
    client.close();
    await stopEngine(engine);
  }
});

test('mTLS: a client certificate from the CA is required', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'luaprov-egrpc-'));
  try {
    execFileSync('sh', [path.join(__dirname, 'make_certs.sh'), dir], { stdio: 'ignore' });
    const file = (n) => path.join(dir, n);
    const engine = await startEngine(['--grpc-cert', file('server.pem'), '--grpc-key', file('server.key'),
      '--grpc-ca', file('ca.pem')]);
    const read = (n) => fs.readFileSync(file(n));
    const good = new CloudProvider(engine.addr,
      grpc.credentials.createSsl(read('ca.pem'), read('client.key'), read('client.pem')));
    const anonymous = new CloudProvider(engine.addr, grpc.credentials.createSsl(read('ca.pem')));
    const stranger = new CloudProvider(engine.addr,
      grpc.credentials.createSsl(read('ca.pem'), read('other-client.key'), read('other-client.pem')));
    try {
      assert.equal((await ok(good, 'NodeGroups')).nodeGroups.length, 3);
      await ok(good, 'NodeGroupIncreaseSize', { id: BATCH, delta: 2 });
      assert.equal((await ok(good, 'NodeGroupTargetSize', { id: BATCH })).targetSize, 2);
      for (const c of [anonymous, stranger]) {
        const { err } = await call(c, 'NodeGroups', {}, 3000);
        assert.ok(err, 'a client without a good certificate must be refused');
        assert.equal(err.code, grpc.status.UNAVAILABLE, err.details);
      }
      const plain = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
      const { err } = await call(plain, 'NodeGroups', {}, 3000);
      assert.ok(err, 'plaintext against the mTLS port must fail');
      plain.close();
    } finally {
      for (const c of [good, anonymous, stranger]) c.close();
      await stopEngine(engine);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---- runner -------------------------------------------------------------------------------------

(async () => {
  const engine = await startEngine();
  const client = new CloudProvider(engine.addr, grpc.credentials.createInsecure());
  let failed = 0;
  for (const t of tests) {
    const started = Date.now();
    try {
      await t.fn({ engine, client });
      console.log(`ok   ${t.name} (${Date.now() - started} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}\n${e.stack}`);
    }
  }
  client.close();
  try {
    await stopEngine(engine);
  } catch (e) {
    failed++;
    console.log(`FAIL shutdown: ${e.message}`);
  }
  console.log(`${tests.length - failed}/${tests.length} passed`);
  process.exit(failed ? 1 : 0);
})();
