// A bare Hocuspocus server for the peer benchmark: no extensions, so documents
// live in memory only (nothing is stored; a document is dropped when its last
// connection leaves). Listens on 127.0.0.1 only, on an ephemeral port, and
// prints "hocuspocus listening on PORT" once ready.
//
// Server.listen() passes `address` where node expects `host` (so it would bind
// every interface); the harness listens on the server's httpServer itself.
import { Server } from '@hocuspocus/server';

const server = new Server({ quiet: true, stopOnSignals: false });
server.httpServer.listen({ port: 0, host: '127.0.0.1' }, () => {
  console.log(`hocuspocus listening on ${server.httpServer.address().port}`);
});
const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
