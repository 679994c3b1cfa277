'use strict';
// aicli's swarm runner, the entrypoint of a swarm job (run by the image's node):
//   node runner.js /run/secrets/<orders>
// The orders (a Swarm secret, on tmpfs) say where aicli is, the attempt's token, the
// start commit, and the CLI's argv, directory, environment and stdin. The runner fetches
// the start commit (a git bundle) and the run's other files (a tar unpacked at /) from
// aicli, runs the CLI under the packing wrapper, streams its stdout and stderr back as
// they come, then posts the work (a git bundle), the task's home and the exit status.
// aicli's stop (the answer to GET /signal) or SIGTERM is passed to the wrapper, which
// stops the CLI and packs the work first.
const fs = require('fs');
const http = require('http');
const { spawn, spawnSync } = require('child_process');

const orders = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const base = new URL(orders.url);

function log(msg) {
  process.stderr.write('aicli-swarm-runner: ' + msg + '\n');
}

// Each request on a connection of its own (`agent: false`): aicli's server closes a
// kept-alive connection that waits 10 s for its next request head, and a request sent
// on one just as it closes would fail ("socket hang up").
function request(method, path, headers) {
  return http.request({
    host: base.hostname,
    port: base.port,
    path: base.pathname + path,
    method,
    agent: false,
    headers: Object.assign({ authorization: 'Bearer ' + orders.token }, headers || {}),
  });
}

// Sends `body` (a readable stream, a string or nothing) to `path`; resolves with the
// status code.
function send(path, body) {
  return new Promise((resolve, reject) => {
    const req = request('POST', path, typeof body === 'string'
      ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
      : { 'content-type': 'application/octet-stream' });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    if (body === undefined || body === null) {
      req.end();
    } else if (typeof body === 'string') {
      req.end(body);
    } else {
      // The head now: a stream may say nothing for minutes (a CLI's quiet stderr), and
      // aicli's server wants a request's head within 10 s of the connection.
      req.flushHeaders();
      body.on('error', (e) => req.destroy(e));
      body.pipe(req);
    }
  });
}

// Runs `argv` with its stdout piped into `path`; resolves with [exit code, status].
function sendFrom(path, argv, opts) {
  const child = spawn(argv[0], argv.slice(1), Object.assign({ stdio: ['ignore', 'pipe', 'inherit'] }, opts));
  const exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
  return Promise.all([exited, send(path, child.stdout)]);
}

// GET `path` into the stdin of `argv` (or a file when `argv` is a string).
function fetchInto(path, argv) {
  return new Promise((resolve, reject) => {
    const req = request('GET', path);
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error('GET ' + path + ': HTTP ' + res.statusCode));
        return;
      }
      if (typeof argv === 'string') {
        const f = fs.createWriteStream(argv, { mode: 0o600 });
        res.pipe(f);
        f.on('finish', resolve);
        f.on('error', reject);
        return;
      }
      const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'inherit', 'pipe'] });
      let said = '';
      child.stderr.on('data', (d) => { if (said.length < 4096) said += d; });
      res.pipe(child.stdin);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(argv[0] + ' exited with ' + code + ': ' + said.trim()))));
    });
    req.on('error', reject);
    req.end();
  });
}

function git(args) {
  const r = spawnSync('git', ['-c', 'core.hooksPath=/dev/null'].concat(args), { cwd: '/workspace', encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error('git ' + args.join(' ') + ': ' + (r.error || r.stderr.trim()));
  }
}

// The workspace: the start commit fetched from its bundle into an empty repository that
// knows it is shallow (the branch's history never travels), checked out, and the
// uncommitted carry restored as uncommitted changes.
async function checkout() {
  const bundle = '/aicli-runner/start.bundle';
  await fetchInto('/start', bundle);
  git(['init', '-q']);
  fs.writeFileSync('/workspace/.git/shallow', orders.base + '\n');
  git(['fetch', '-q', '--no-tags', bundle, '+refs/aicli/*:refs/aicli/*']);
  if (orders.branch) {
    git(['update-ref', 'refs/heads/' + orders.branch, orders.base]);
    git(['symbolic-ref', 'HEAD', 'refs/heads/' + orders.branch]);
  } else {
    git(['update-ref', '--no-deref', 'HEAD', orders.base]);
  }
  git(['reset', '-q', '--hard', orders.base]);
  if (orders.carry) {
    git(['read-tree', '-u', '--reset', 'refs/aicli/carry']);
    git(['reset', '-q']);
    git(['update-ref', '-d', 'refs/aicli/carry']);
  }
  git(['update-ref', '-d', 'refs/aicli/start']);
  fs.unlinkSync(bundle);
}

async function main() {
  // As the image's user: existing directories (/workspace, /home/aicli, /aicli) keep
  // their owner and mode.
  await fetchInto('/files', ['tar', '-x', '--no-overwrite-dir', '-f', '-', '-C', '/']);
  await checkout();
  const env = Object.assign({}, process.env, orders.env);
  // The packing wrapper, then the CLI.
  const cli = spawn(orders.argv[0], orders.argv.slice(1), {
    cwd: orders.cwd,
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stopping = false;
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    process.on(sig, () => {
      stopping = true;
      cli.kill('SIGTERM');
    });
  }
  // aicli's stop (a cancel, a timeout) comes as the answer to a request held open.
  let done = false;
  const pollSignal = () => {
    if (done) return;
    const req = request('GET', '/signal');
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => {
        if (res.statusCode === 200 && body.trim() === 'TERM') {
          stopping = true;
          cli.kill('SIGTERM');
        } else {
          setTimeout(pollSignal, 1000);
        }
      });
    });
    req.on('error', () => setTimeout(pollSignal, 1000));
    req.end();
  };
  pollSignal();
  // A failed stream is said and the run goes on (its exit and work still go back).
  // A failed stream is said and drained (the CLI must not block on a full pipe), and
  // the run goes on: its exit and work still go back.
  const drainOnFailure = (stream, name) => (e) => {
    log(name + ': ' + e);
    stream.resume();
  };
  const out = send('/out', cli.stdout).catch(drainOnFailure(cli.stdout, 'stdout'));
  const err = send('/err', cli.stderr).catch(drainOnFailure(cli.stderr, 'stderr'));
  cli.stdin.on('error', () => {});
  if (orders.stdin !== null && orders.stdin !== undefined) {
    cli.stdin.write(orders.stdin);
  }
  cli.stdin.end();
  const [code, signal] = await new Promise((resolve) => cli.on('close', (c, s) => resolve([c, s])));
  done = true;
  await Promise.all([out, err]);
  if (fs.existsSync('/aicli-runner/work.bundle')) {
    const status = await send('/work', fs.createReadStream('/aicli-runner/work.bundle'));
    if (status !== 204) log('POST /work: HTTP ' + status);
  } else {
    log('no work bundle (see /aicli-runner/collect.log)');
  }
  const [tarCode, homeStatus] = await sendFrom('/home', ['tar', '-c', '-f', '-', '-C', '/home', 'aicli']);
  if (tarCode !== 0 || homeStatus !== 204) log('home: tar ' + tarCode + ', HTTP ' + homeStatus);
  await send('/exit', JSON.stringify({ code, signal, stopping }));
  process.exit(code === null ? 1 : code);
}

main().catch((e) => {
  log(String(e && e.stack ? e.stack : e));
  send('/exit', JSON.stringify({ code: null, signal: null, error: String(e) }))
    .catch(() => {})
    .finally(() => process.exit(70));
});
