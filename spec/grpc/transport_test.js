// The engine's gRPC server (grpc_echo_server, built by CMake) against an independent client:
// @grpc/grpc-js, the same HTTP/2 and gRPC framing a Go client speaks, from another implementation.
// Checks unary echo, 100 concurrent calls on one channel, deadlines, UNIMPLEMENTED, error details,
// message size limits, mTLS with and without a client certificate, and a server closing with calls
// in flight. Each server is stopped with SIGTERM and must exit 0 (under ASan: without a report).
//
//   LUAPROV_GRPC_ECHO_SERVER=build/spec/grpc_echo_server node spec/grpc/transport_test.js
'use strict';

// grpc-js sets the TLS ServerName to the target host even when it is an IP, as the CA's Go client
// does; Node warns about that (DEP0123) on every connection.
process.noDeprecation = true;

const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

let grpc, protoLoader;
try {
  grpc = require('@grpc/grpc-js');
  protoLoader = require('@grpc/proto-loader');
} catch (e) {
  console.error('transport_test: run `npm ci --prefix spec/grpc` first (' + e.message + ')');
  process.exit(1);
}

const SERVER = process.env.LUAPROV_GRPC_ECHO_SERVER;
if (!SERVER) {
  console.error('transport_test: set LUAPROV_GRPC_ECHO_SERVER to the grpc_echo_server binary');
  process.exit(1);
}

const definition = protoLoader.loadSync(path.join(__dirname, 'echo.proto'), { keepCase: true, defaults: true });
const Echo = grpc.loadPackageDefinition(definition).luaprov.test.Echo;

function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(SERVER, args, { stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
    proc.on('error', reject);
    readline.createInterface({ input: proc.stdout }).once('line', (line) => {
      resolve({ proc, exited, port: JSON.parse(line).port });
    });
    exited.then(({ code }) => reject(new Error('grpc_echo_server exited early with ' + code)));
  });
}

async function stopServer(server) {
  // A second SIGTERM could land after the server closed its signal handler and kill it.
  if (!server.proc.killed) server.proc.kill('SIGTERM');
  const timeout = new Promise((res) => setTimeout(() => res('timeout'), 10000));
  const result = await Promise.race([server.exited, timeout]);
  assert.notEqual(result, 'timeout', 'grpc_echo_server did not exit after SIGTERM');
  assert.deepEqual(result, { code: 0, signal: null }, 'grpc_echo_server exit status');
}

function call(client, method, request, options = {}) {
  return new Promise((resolve) => {
    client[method](request, options, (err, reply) => resolve({ err, reply }));
  });
}

function deadline(ms) {
  return { deadline: new Date(Date.now() + ms) };
}

const tests = [];
function test(name, fn) {
  tests.push({ name, fn });
}

test('h2c: unary echo, error details, unknown method, deadline, sizes, 100 concurrent', async () => {
  const server = await startServer([]);
  const client = new Echo(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  try {
    const payload = Buffer.from([0, 1, 2, 250, 255]);
    let r = await call(client, 'Echo', { text: 'hello', payload }, deadline(5000));
    assert.ifError(r.err);
    assert.equal(r.reply.text, 'hello');
    assert.deepEqual(Buffer.from(r.reply.payload), payload);

    r = await call(client, 'Echo', {}, deadline(5000)); // an empty message is zero bytes on the wire
    assert.ifError(r.err);
    assert.equal(r.reply.text, '');

    r = await call(client, 'Fail', { text: 'x' }, deadline(5000));
    assert.equal(r.err && r.err.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(r.err.details, 'bad input: café 100%'); // percent-encoded on the wire

    r = await call(client, 'Missing', { text: 'x' }, deadline(5000));
    assert.equal(r.err && r.err.code, grpc.status.UNIMPLEMENTED);

    r = await call(client, 'Slow', { text: 'late' }, deadline(200));
    assert.equal(r.err && r.err.code, grpc.status.DEADLINE_EXCEEDED);

    // 3 MiB each way: flow control (windows, WINDOW_UPDATE) in both directions.
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    r = await call(client, 'Echo', { payload: big }, deadline(10000));
    assert.ifError(r.err);
    assert.equal(Buffer.compare(Buffer.from(r.reply.payload), big), 0);

    // Over the server's 4 MiB default limit.
    r = await call(client, 'Echo', { payload: Buffer.alloc(5 * 1024 * 1024, 1) }, deadline(10000));
    assert.equal(r.err && r.err.code, grpc.status.RESOURCE_EXHAUSTED);

    const replies = await Promise.all(
      Array.from({ length: 100 }, (_, i) => call(client, 'Echo', { text: 'call ' + i }, deadline(10000))),
    );
    replies.forEach((x, i) => {
      assert.ifError(x.err);
      assert.equal(x.reply.text, 'call ' + i);
    });

    // The channel still works after all that.
    r = await call(client, 'Echo', { text: 'again' }, deadline(5000));
    assert.ifError(r.err);
    assert.equal(r.reply.text, 'again');
  } finally {
    client.close();
    await stopServer(server);
  }
});

test('h2c: closing the server answers calls in flight UNAVAILABLE', async () => {
  const server = await startServer([]);
  const client = new Echo(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  try {
    const r0 = await call(client, 'Echo', { text: 'warm' }, deadline(5000));
    assert.ifError(r0.err);
    const pending = Array.from({ length: 5 }, () => call(client, 'Slow', { text: 'held' }, deadline(10000)));
    await new Promise((res) => setTimeout(res, 200));
    server.proc.kill('SIGTERM');
    for (const r of await Promise.all(pending)) assert.equal(r.err && r.err.code, grpc.status.UNAVAILABLE);
  } finally {
    client.close();
    await stopServer(server); // already stopping: waits for its exit
  }
});

test('mTLS: client certificate accepted; none, or one from another CA, refused', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'luaprov-grpc-certs-'));
  const server = { proc: null };
  try {
    execFileSync('sh', [path.join(__dirname, 'make_certs.sh'), dir], { stdio: 'inherit' });
    const read = (name) => fs.readFileSync(path.join(dir, name));
    Object.assign(server, await startServer(['--tls', dir]));
    // The CA's client sets ServerName to the address host: here the IP, matched by the SAN.
    const target = `127.0.0.1:${server.port}`;

    const good = new Echo(target, grpc.credentials.createSsl(read('ca.pem'), read('client.key'), read('client.pem')));
    let r = await call(good, 'Echo', { text: 'secure' }, deadline(5000));
    good.close();
    assert.ifError(r.err);
    assert.equal(r.reply.text, 'secure');

    const anonymous = new Echo(target, grpc.credentials.createSsl(read('ca.pem')));
    r = await call(anonymous, 'Echo', { text: 'x' }, deadline(5000));
    anonymous.close();
    assert.ok(r.err, 'a client without a certificate must be refused');
    assert.equal(r.err.code, grpc.status.UNAVAILABLE);

    const stranger = new Echo(
      target,
      grpc.credentials.createSsl(read('ca.pem'), read('other-client.key'), read('other-client.pem')),
    );
    r = await call(stranger, 'Echo', { text: 'x' }, deadline(5000));
    stranger.close();
    assert.ok(r.err, 'a client certificate from another CA must be refused');
    assert.equal(r.err.code, grpc.status.UNAVAILABLE);
  } finally {
    if (server.proc) await stopServer(server);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

(async () => {
  let failed = 0;
  for (const t of tests) {
    try {
      await t.fn();
      console.log('ok   ' + t.name);
    } catch (e) {
      failed++;
      console.log('FAIL ' + t.name + '\n' + (e && e.stack ? e.stack : e));
    }
  }
  console.log(`${tests.length - failed} of ${tests.length} passed`);
  process.exit(failed ? 1 : 0);
})();
