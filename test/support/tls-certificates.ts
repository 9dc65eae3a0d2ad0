import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** PEM files of a throwaway CA, a server certificate for localhost/127.0.0.1 and a client certificate, both signed by the CA. */
export interface TestCertificates {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** The file contents, for clients that take PEM bytes. */
  pem(path: string): Buffer;
  remove(): void;
}

/** Makes the certificates with the `openssl` command (scripts/test.sh installs it), valid for one day. */
export function makeTestCertificates(): TestCertificates {
  const dir = mkdtempSync(join(tmpdir(), "contextd-tls-"));
  const path = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  const key = (name: string) => openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path(name));
  key("ca.key");
  openssl("req", "-x509", "-new", "-key", path("ca.key"), "-out", path("ca.pem"), "-days", "1", "-subj", "/CN=contextd test CA");
  const sign = (name: string, subject: string, extensions: string) => {
    key(`${name}.key`);
    openssl("req", "-new", "-key", path(`${name}.key`), "-out", path(`${name}.csr`), "-subj", subject);
    writeFileSync(path(`${name}.ext`), extensions);
    openssl("x509", "-req", "-in", path(`${name}.csr`), "-CA", path("ca.pem"), "-CAkey", path("ca.key"), "-CAcreateserial",
      "-out", path(`${name}.pem`), "-days", "1", "-extfile", path(`${name}.ext`));
  };
  sign("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  sign("client", "/CN=contextd test client", "extendedKeyUsage=clientAuth\n");
  return {
    dir,
    caCert: path("ca.pem"),
    serverCert: path("server.pem"),
    serverKey: path("server.key"),
    clientCert: path("client.pem"),
    clientKey: path("client.key"),
    pem: (file) => readFileSync(file),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
