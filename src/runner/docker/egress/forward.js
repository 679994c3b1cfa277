// aicli's egress forwarder, run by node in a task's container (which has no network):
// each `port socket` pair of its arguments is a listener on 127.0.0.1:port whose
// connections go to that unix socket (aicli's proxy, aicli's MCP server). Once every
// listener is up it creates the file named by its first argument.
const net = require('net');
const fs = require('fs');
const [ready, ...pairs] = process.argv.slice(1);
let pending = pairs.length / 2;
for (let i = 0; i + 1 < pairs.length; i += 2) {
  const port = Number(pairs[i]);
  const socket = pairs[i + 1];
  const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (c) => {
    const u = net.connect({ path: socket, allowHalfOpen: true });
    // Each end's EOF ends the other's writing (pipe), once what was queued is written;
    // an error ends both at once.
    c.pipe(u);
    u.pipe(c);
    c.on('error', () => u.destroy());
    u.on('error', () => c.destroy());
  });
  server.on('error', (e) => {
    process.stderr.write(`aicli egress forwarder: 127.0.0.1:${port}: ${e.message}\n`);
    process.exit(1);
  });
  server.listen(port, '127.0.0.1', () => {
    pending -= 1;
    if (pending === 0) fs.writeFileSync(ready, '');
  });
}
