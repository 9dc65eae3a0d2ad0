// Prints one line per failed test of every suite's result file in .test-results, just before
// scripts/test.sh's summary line. Why it exists: CI keeps only the tail of a run's output, and a
// "2 failed" there said nothing about which two; these lines name them and the first line of why.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

const results = process.argv[2] ?? ".test-results";
const lines = [];
const firstLine = (text) => String(text ?? "").split("\n").find((line) => line.trim() !== "")?.trim().slice(0, 300) ?? "";

function vitest(file) {
  const report = JSON.parse(readFileSync(file, "utf8"));
  for (const suite of report.testResults ?? []) {
    if (suite.status === "failed" && (suite.assertionResults ?? []).length === 0) {
      lines.push(`vitest ${suite.name}: did not load: ${firstLine(suite.message)}`);
    }
    for (const test of suite.assertionResults ?? []) {
      if (test.status === "failed") lines.push(`vitest ${test.fullName}: ${firstLine(test.failureMessages?.[0])}`);
    }
  }
}

function goTest(file, suiteName) {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.includes('"Action":"fail"')) continue;
    try {
      const event = JSON.parse(line);
      if (event.Test) lines.push(`${suiteName} ${event.Package} ${event.Test}`);
    } catch {
      // A line go test cut short; the summary already counts its test.
    }
  }
}

// pytest's JUnit XML: a <testcase> that holds a <failure>, <error> or <skipped> element.
function junit(file, suiteName) {
  const xml = readFileSync(file, "utf8");
  const testcase = /<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g;
  for (const match of xml.matchAll(testcase)) {
    const body = match[2] ?? "";
    const outcome = /<(failure|error|skipped)\b([^>]*)/.exec(body);
    if (!outcome) continue;
    const attribute = (attributes, name) => new RegExp(`\\b${name}="([^"]*)"`).exec(attributes)?.[1] ?? "";
    const testName = `${attribute(match[1], "classname")}::${attribute(match[1], "name")}`;
    lines.push(`${suiteName} ${testName} ${outcome[1]}: ${firstLine(attribute(outcome[2], "message"))}`);
  }
}

function tap(file, suiteName) {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const match = /^\s*not ok \d+ - (.*)$/.exec(line);
    if (match) lines.push(`${suiteName} ${match[1]}`);
  }
}

const read = (name, reader, suiteName) => {
  const file = join(results, name);
  if (!existsSync(file)) return;
  try {
    reader(file, suiteName);
  } catch (error) {
    lines.push(`${suiteName ?? name}: result file unreadable: ${firstLine(error?.message)}`);
  }
};

read("vitest.json", vitest, "vitest");
read("go-test.json", goTest, "go-test");
read("go-installed.json", goTest, "go-installed");
read("pytest.xml", junit, "pytest");
for (const name of existsSync(results) ? readdirSync(results) : []) {
  if (/^upstream-.*\.xml$/.test(name)) read(name, junit, name.replace(/\.xml$/, ""));
}
read("ts-client.tap", tap, "ts-client");

for (const line of lines) console.log(`FAILED ${line}`);
