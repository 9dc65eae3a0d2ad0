import { describe, expect, it } from "vitest";
import { describeClusterSeeds, parseClusterSeeds } from "../../src/store/redis-cluster-seeds.js";

describe("Redis Cluster seeds", () => {
  it("takes host:port, or redis:// and rediss:// URLs that carry the cluster's credentials", () => {
    expect(parseClusterSeeds(["10.0.0.1:7000", "[::1]:7001"])).toEqual({ nodes: [{ host: "10.0.0.1", port: 7000 }, { host: "::1", port: 7001 }], tls: false });
    expect(parseClusterSeeds(["rediss://app:s%40cret@a.example:6380", "rediss://app:s%40cret@b.example:6380"])).toEqual({
      nodes: [{ host: "a.example", port: 6380 }, { host: "b.example", port: 6380 }],
      username: "app",
      password: "s@cret",
      tls: true,
    });
    // A password without a user is the default user's (requirepass).
    expect(parseClusterSeeds(["redis://:pw@h:1"])).toEqual({ nodes: [{ host: "h", port: 1 }], password: "pw", tls: false });
  });

  it("refuses seeds that disagree on TLS or credentials, and malformed ones, naming the entry without its password", () => {
    expect(() => parseClusterSeeds(["rediss://:pw@a:1", "redis://:pw@b:1"])).toThrow(/"redis:\/\/\(credentials\)@b:1" and "rediss:\/\/\(credentials\)@a:1" disagree on TLS/);
    expect(() => parseClusterSeeds(["redis://:one@a:1", "redis://:two@b:1"])).toThrow(/"redis:\/\/\(credentials\)@b:1" has other credentials/);
    expect(() => parseClusterSeeds(["redis://:pw@a:1", "b:1"])).toThrow(/"b:1" has other credentials/);
    expect(() => parseClusterSeeds(["redis://:pw@a:1/2"])).toThrow(/no databases or options/);
    expect(() => parseClusterSeeds(["redis://a"])).toThrow(/has no port/);
    expect(() => parseClusterSeeds(["http://a:1"])).toThrow(/want host:port, redis:\/\//);
    expect(() => parseClusterSeeds(["a:99999"])).toThrow(/"a:99999" is not host:port/);
    expect(() => parseClusterSeeds([])).toThrow(/at least one seed/);
    for (const entry of ["rediss://:pw@a:1", "redis://user:pw@a:1"]) {
      expect(() => parseClusterSeeds([entry, "redis://:other@b:2"])).toThrow(/\(credentials\)/);
      expect(() => parseClusterSeeds([entry, "redis://:other@b:2"])).not.toThrow(/pw/);
    }
    expect(describeClusterSeeds(["rediss://app:pw@a:1", "b:2"])).toBe("rediss://(credentials)@a:1,b:2");
  });
});
