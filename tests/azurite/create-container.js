// Creates a blob container on Azurite (Azure Blob Storage's emulator) with the emulator's
// well-known account and key, signed by hand (Shared Key), so the set-up needs no Azure SDK.
// Already there is fine.
//
//   node create-container.js http://127.0.0.1:PORT/devstoreaccount1 CONTAINER
const crypto = require("crypto");
const http = require("http");

const [endpoint, container] = process.argv.slice(2);
const account = "devstoreaccount1";
// Azurite's documented development key (not a secret: every emulator has it).
const key = Buffer.from(
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
  "base64",
);
const url = new URL(`${endpoint}/${container}?restype=container`);
const date = new Date().toUTCString();
const version = "2021-08-06";
const toSign = [
  "PUT", "", "", "", "", "", "", "", "", "", "", "",
  `x-ms-date:${date}`,
  `x-ms-version:${version}`,
  `/${account}${url.pathname}`,
  "restype:container",
].join("\n");
const sig = crypto.createHmac("sha256", key).update(toSign, "utf8").digest("base64");
const req = http.request(url, {
  method: "PUT",
  headers: {
    "x-ms-date": date,
    "x-ms-version": version,
    "Content-Length": "0",
    Authorization: `SharedKey ${account}:${sig}`,
  },
}, (res) => {
  let body = "";
  res.on("data", (d) => (body += d));
  res.on("end", () => {
    if (res.statusCode === 201 || res.statusCode === 409) process.exit(0);
    console.error(`create container ${container}: HTTP ${res.statusCode} ${body}`);
    process.exit(1);
  });
});
req.on("error", (e) => { console.error(`create container ${container}: ${e.message}`); process.exit(1); });
req.end();
