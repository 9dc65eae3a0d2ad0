/**
 * A Redis Cluster's seed nodes, and how to reach them.
 *
 * Why it exists: a managed cluster (ElastiCache, Memorystore, a self-run one with `requirepass`)
 * asks for a password and usually TLS, and ioredis takes those once for every node (the nodes it
 * discovers from the seeds included), not per seed. So the seeds are given as plain `host:port`
 * or as URLs `redis://[user[:password]@]host:port` / `rediss://...` (TLS), and every entry must
 * agree on the scheme and the credentials: two seeds with different passwords are a mistake the
 * sidecar refuses at start, naming the entry, rather than one it finds at the first failover.
 */
export interface RedisClusterSeeds {
  nodes: { host: string; port: number }[];
  /** ACL user; undefined = the default user. */
  username?: string;
  /** undefined = no AUTH. */
  password?: string;
  /** rediss:// seeds: TLS to every node. */
  tls: boolean;
}

interface Seed {
  host: string;
  port: number;
  scheme: "plain" | "redis" | "rediss";
  username?: string;
  password?: string;
}

/** Parses `--redis-cluster-nodes` entries; throws an Error naming the entry that is wrong. */
export function parseClusterSeeds(entries: readonly string[]): RedisClusterSeeds {
  if (entries.length === 0) throw new Error("a redis cluster needs at least one seed node");
  const seeds = entries.map(parseSeed);
  const first = seeds[0]!;
  const secured = (seed: Seed) => seed.scheme === "rediss";
  for (const [index, seed] of seeds.entries()) {
    if (secured(seed) !== secured(first)) {
      throw new Error(`redis cluster seed "${describe(entries[index]!)}" and "${describe(entries[0]!)}" disagree on TLS: give every seed as rediss:// or none`);
    }
    if (seed.username !== first.username || seed.password !== first.password) {
      throw new Error(`redis cluster seed "${describe(entries[index]!)}" has other credentials than "${describe(entries[0]!)}": every node of a cluster is reached with the same user and password`);
    }
  }
  return {
    nodes: seeds.map(({ host, port }) => ({ host, port })),
    ...(first.username !== undefined ? { username: first.username } : {}),
    ...(first.password !== undefined ? { password: first.password } : {}),
    tls: secured(first),
  };
}

/** The seeds without credentials, for messages and logs: "host:port,host:port". */
export function describeClusterSeeds(entries: readonly string[]): string {
  return entries.map(describe).join(",");
}

function parseSeed(entry: string): Seed {
  const scheme = /^(rediss?):\/\//i.exec(entry)?.[1]?.toLowerCase() as "redis" | "rediss" | undefined;
  if (scheme === undefined) {
    if (entry.includes("://") || entry.includes("@")) throw new Error(`redis cluster seed "${describe(entry)}": want host:port, redis://[user[:password]@]host:port or rediss://...`);
    return { ...hostAndPort(entry, entry), scheme: "plain" };
  }
  let url: URL;
  try {
    url = new URL(entry);
  } catch {
    throw new Error(`redis cluster seed "${describe(entry)}" is not a URL: want ${scheme}://[user[:password]@]host:port`);
  }
  if ((url.pathname !== "" && url.pathname !== "/") || url.search !== "" || url.hash !== "") {
    throw new Error(`redis cluster seed "${describe(entry)}": a cluster has no databases or options in its URL; want ${scheme}://[user[:password]@]host:port`);
  }
  if (url.port === "") throw new Error(`redis cluster seed "${describe(entry)}" has no port`);
  return {
    ...hostAndPort(`${url.hostname}:${url.port}`, entry),
    scheme,
    ...(url.username !== "" ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password !== "" ? { password: decodeURIComponent(url.password) } : {}),
  };
}

function hostAndPort(address: string, entry: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  const port = Number(address.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`redis cluster seed "${describe(entry)}" is not host:port`);
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port };
}

/** An entry with its credentials left out. */
function describe(entry: string): string {
  return entry.replace(/\/\/[^@/]*@/, "//(credentials)@");
}
