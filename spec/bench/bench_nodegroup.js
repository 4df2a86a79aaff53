// The externalgrpc NodeGroup service under load, as the Cluster Autoscaler uses it:
//   1. NodeGroupTargetSize (asked uncached many times per CA loop): round trips/s, p50 and p99 with 1
//      and 32 calls in flight on one channel, against `luaprov run --sim --grpc-addr` AND against a
//      minimal @grpc/grpc-js server process answering the same method from memory (the reference:
//      what the same client gets from a server that does nothing);
//   2. Refresh of a simulated cluster of 50 pools / 2,000 nodes (POST /_sim/cluster), and the reads
//      that follow it: NodeGroupNodes of every pool, NodeGroupForNode of every node. The simulator
//      runs on the engine's own loop, so the Refresh time includes the simulated KaaS API's work.
// Prints figures; never fails on time.
//
//   node spec/bench/bench_nodegroup.js build-bench/luaprov [seconds per run, default 3]
'use strict';

const { createRequire } = require('node:module');
const { spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

// the client libraries live with the gRPC tests (npm ci --prefix spec/grpc)
const requireGrpc = createRequire(path.join(__dirname, '..', 'grpc', 'package.json'));
const grpc = requireGrpc('@grpc/grpc-js');
const protoLoader = requireGrpc('@grpc/proto-loader');

const LUAPROV = process.argv[2] || process.env.LUAPROV;
const SECONDS = Number(process.argv[3] || process.env.BENCH_SECONDS || 3);
if (!LUAPROV && process.argv[2] !== '--reference-server') {
  console.error('usage: node spec/bench/bench_nodegroup.js path/to/luaprov [seconds]');
  process.exit(2);
}

const definition = protoLoader.loadSync('externalgrpc.proto', {
  keepCase: true,
  defaults: true,
  includeDirs: [path.join(__dirname, '..', '..', 'engine', 'grpc')],
});
const pkg = grpc.loadPackageDefinition(definition).clusterautoscaler.cloudprovider.v1.externalgrpc;

function startEngine() {
  return new Promise((resolve, reject) => {
    const proc = spawn(LUAPROV, ['run', '--sim', '--grpc-addr', '127.0.0.1:0', '--metrics-addr', '127.0.0.1:0',
      '--log-level', 'info', '--log-format', 'json'], { stdio: ['ignore', 'ignore', 'pipe'] });
    proc.on('error', reject);
    proc.on('exit', (code) => reject(new Error('luaprov run exited with ' + code)));
    readline.createInterface({ input: proc.stderr }).on('line', (line) => {
      if (!line.includes('"engine started"')) return;
      const entry = JSON.parse(line);
      resolve({ proc, addr: entry.grpc_addr, sim: entry.sim.bizfly });
    });
  });
}

// The reference: grpc-js serving NodeGroupTargetSize from a map, nothing else, in a process of its
// own (as luaprov is), so that it does not share the client's event loop.
function serveReference() {
  const server = new grpc.Server();
  const targets = new Map([['66a0f1c2b3d4e5f601a2b3c4', 2]]);
  server.addService(pkg.CloudProvider.service, {
    NodeGroupTargetSize(call, callback) {
      const t = targets.get(call.request.id);
      if (t === undefined) callback({ code: grpc.status.NOT_FOUND, details: 'NodeGroup not found' });
      else callback(null, { targetSize: t });
    },
  });
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    console.log(JSON.stringify({ port }));
  });
}

function startReference() {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [__filename, '--reference-server'], { stdio: ['ignore', 'pipe', 'inherit'] });
    proc.on('error', reject);
    readline.createInterface({ input: proc.stdout }).once('line', (line) => {
      resolve({ proc, addr: '127.0.0.1:' + JSON.parse(line).port });
    });
  });
}

const unary = (client, method, request) =>
  new Promise((resolve, reject) => {
    client[method](request, (err, reply) => (err ? reject(err) : resolve(reply)));
  });

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function load(client, inFlight, seconds) {
  const latencies = [];
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  const request = { id: '66a0f1c2b3d4e5f601a2b3c4' };
  async function worker() {
    while (process.hrtime.bigint() < end) {
      const t0 = process.hrtime.bigint();
      await unary(client, 'NodeGroupTargetSize', request);
      latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
  }
  const started = process.hrtime.bigint();
  await Promise.all(Array.from({ length: inFlight }, worker));
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  latencies.sort((a, b) => a - b);
  return { rps: latencies.length / elapsed, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

const fmt = (r) =>
  `${Math.round(r.rps).toString().padStart(7)} calls/s   p50 ${r.p50.toFixed(3)} ms   p99 ${r.p99.toFixed(3)} ms`;

async function timed(fn) {
  const t0 = process.hrtime.bigint();
  const value = await fn();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, value };
}

async function main() {
  const engine = await startEngine();
  const reference = await startReference();
  const luaprov = new pkg.CloudProvider(engine.addr, grpc.credentials.createInsecure());
  const baseline = new pkg.CloudProvider(reference.addr, grpc.credentials.createInsecure());
  try {
    await unary(luaprov, 'Refresh', {});
    console.log(`NodeGroupTargetSize, one grpc-js channel, ${SECONDS} s per run (h2c, loopback):`);
    for (const inFlight of [1, 32]) {
      await load(luaprov, inFlight, 0.5); // warm-up
      await load(baseline, inFlight, 0.5);
      console.log(`  luaprov        ${String(inFlight).padStart(2)} in flight: ${fmt(await load(luaprov, inFlight, SECONDS))}`);
      console.log(`  grpc-js server ${String(inFlight).padStart(2)} in flight: ${fmt(await load(baseline, inFlight, SECONDS))}`);
    }

    const res = await fetch(engine.sim + '/_sim/cluster', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ pools: 50, nodes: 2000 }),
    });
    if (!res.ok) throw new Error('POST /_sim/cluster: ' + res.status + ' ' + (await res.text()));
    const runs = [];
    for (let i = 0; i < 10; i++) runs.push((await timed(() => unary(luaprov, 'Refresh', {}))).ms);
    runs.sort((a, b) => a - b);
    const groups = (await unary(luaprov, 'NodeGroups', {})).nodeGroups;
    console.log(`Refresh of ${groups.length} pools / 2,000 nodes (1 + ${groups.length} simulated KaaS GETs), 10 runs:` +
      ` min ${runs[0].toFixed(1)} ms   p50 ${percentile(runs, 50).toFixed(1)} ms   max ${runs[runs.length - 1].toFixed(1)} ms`);
    const nodes = await timed(() => Promise.all(groups.map((g) => unary(luaprov, 'NodeGroupNodes', { id: g.id }))));
    const ids = nodes.value.flatMap((r) => r.instances.map((i) => i.id));
    console.log(`  NodeGroupNodes of all ${groups.length} pools (${ids.length} instances): ${nodes.ms.toFixed(1)} ms`);
    const owners = await timed(() =>
      Promise.all(ids.map((id) => unary(luaprov, 'NodeGroupForNode', { node: { providerID: id, name: id } })))
    );
    const managed = owners.value.filter((r) => r.nodeGroup.id !== '').length;
    console.log(`  NodeGroupForNode of every node (${managed}/${ids.length} managed): ${owners.ms.toFixed(1)} ms`);
  } finally {
    luaprov.close();
    baseline.close();
    reference.proc.kill('SIGTERM');
    engine.proc.removeAllListeners('exit');
    engine.proc.kill('SIGTERM');
  }
}

if (process.argv[2] === '--reference-server') {
  serveReference();
} else {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
