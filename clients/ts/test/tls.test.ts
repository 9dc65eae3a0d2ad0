// The tls option against a sidecar serving TLS (--tls-cert, --tls-key) with a throwaway CA, over
// both protocols, and mutual TLS (--tls-client-ca). tls-certificates.ts is the repository's
// test/support helper, copied next to this file by scripts/test-installed.sh.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, Code, ContextdError, remember } from "@contextd/client";
import { makeTestCertificates, type TestCertificates } from "./tls-certificates.ts";
import { freshId, startSidecar, type Sidecar } from "./sidecar.ts";

const once = { maxAttempts: 1, initialBackoffMs: 1, maxBackoffMs: 1, multiplier: 1 };
let certificates: TestCertificates;
let sidecar: Sidecar;
before(async () => {
  certificates = makeTestCertificates();
  sidecar = await startSidecar(["--tls-cert", certificates.serverCert, "--tls-key", certificates.serverKey]);
});
after(async () => {
  await sidecar.stop();
  certificates.remove();
});

for (const protocol of ["grpc", "connect"] as const) {
  test(`over ${protocol}, a client trusting the CA commits and reads over TLS; one that does not, or speaks cleartext, is refused`, async () => {
    const trusted = new Client({ address: sidecar.address, protocol, tls: { ca: certificates.pem(certificates.caCert) } });
    const untrusted = new Client({ address: sidecar.address, protocol, tls: true, retry: once });
    const cleartext = new Client({ address: sidecar.address, protocol, retry: once, timeoutMs: 5000 });
    try {
      await trusted.waitReady();
      const conversationId = freshId("tls");
      assert.equal((await trusted.commit({ conversationId, deltas: [remember("over tls")] })).version, 1n);
      assert.equal((await trusted.getState({ conversationId })).state!.experiences[0]!.text, "over tls");
      const refused = await untrusted.getState({ conversationId }).catch((e: unknown) => e);
      // connect-es reports a certificate it cannot verify as INTERNAL, naming the reason.
      assert.ok(refused instanceof ContextdError && refused.code === Code.Internal, String(refused));
      assert.match(refused.message, /unable to verify the first certificate/);
      const plain = await cleartext.getState({ conversationId }).catch((e: unknown) => e);
      assert.ok(plain instanceof ContextdError, String(plain));
    } finally {
      trusted.close();
      untrusted.close();
      cleartext.close();
    }
  });
}

test("mutual TLS: with --tls-client-ca the client's cert and key options are required", async () => {
  const mutual = await startSidecar(["--tls-cert", certificates.serverCert, "--tls-key", certificates.serverKey, "--tls-client-ca", certificates.caCert]);
  const ca = certificates.pem(certificates.caCert);
  const withCert = new Client({ address: mutual.address, tls: { ca, cert: certificates.pem(certificates.clientCert), key: certificates.pem(certificates.clientKey) } });
  const withoutCert = new Client({ address: mutual.address, tls: { ca }, retry: once, timeoutMs: 5000 });
  try {
    assert.equal((await withCert.commit({ conversationId: freshId("mtls"), deltas: [remember("mutual")] })).version, 1n);
    const refused = await withoutCert.getState({ conversationId: "x" }).catch((e: unknown) => e);
    assert.ok(refused instanceof ContextdError, String(refused));
  } finally {
    withCert.close();
    withoutCert.close();
    await mutual.stop();
  }
});
