/**
 * A Redis Cluster node's refusal to run a command here, read from its error reply. Redis answers
 * these before it runs anything, so the command (a commit script too) is safe to send again:
 * - MOVED: the slot is served by `address` now (a failover promoted a replica, or a resharding
 *   finished): send it there, and refresh the slot map.
 * - ASK: the slot is migrating and this command's keys are already at `address`: send it there
 *   once, behind ASKING, without changing the slot map.
 * - TRYAGAIN (some keys moved, some not, during a migration) and CLUSTERDOWN (the node's view of the
 *   cluster is failed): the same node, after a pause.
 */
export type ClusterRedirection =
  | { kind: "moved" | "ask"; slot: number; address: string }
  | { kind: "tryagain" | "clusterdown" };

/** The redirection an error reply asks for, or undefined for any other error. */
export function clusterRedirection(error: unknown): ClusterRedirection | undefined {
  if (!(error instanceof Error) || error.name !== "ReplyError") return undefined;
  const redirect = /^(MOVED|ASK) (\d+) (\S+)$/.exec(error.message);
  if (redirect) return { kind: redirect[1] === "MOVED" ? "moved" : "ask", slot: Number(redirect[2]), address: redirect[3]! };
  if (error.message.startsWith("TRYAGAIN")) return { kind: "tryagain" };
  if (error.message.startsWith("CLUSTERDOWN")) return { kind: "clusterdown" };
  return undefined;
}
