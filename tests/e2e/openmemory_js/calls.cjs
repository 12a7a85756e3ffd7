// Every call of OpenMemory's JavaScript SDK (openmemory-js@0.3.0, unmodified) outside its IDE and compression
// endpoints, against a Mnemoflow gateway. Prints one JSON object: each call's name, whether it succeeded, and what it
// returned (or the SDK's error). A failed call does not stop the others, so one run gives the whole table.
//
// node calls.cjs <node_modules dir>   with OM_BASE_URL, OM_USER_ID, OM_NAMESPACE, OM_TOKEN (and OM_API_KEY if any)
"use strict";

const path = require("path");
const { OpenMemory } = require(path.join(process.argv[2], "openmemory-js"));

const env = process.env;
const om = new OpenMemory({ baseUrl: env.OM_BASE_URL, apiKey: env.OM_API_KEY || undefined, timeout: 30000 });
const user = env.OM_USER_ID;
const ns = env.OM_NAMESPACE;
const token = env.OM_TOKEN; // a word no other test writes, so what comes back is this run's
const calls = [];
const ids = {};

async function call(name, fn) {
    try {
        const result = await fn();
        calls.push({ name, ok: true, result });
        return result;
    } catch (err) {
        calls.push({ name, ok: false, error: String(err && err.message ? err.message : err) });
        return null;
    }
}

const USER_MEMORIES = [
    [`${token}: Alice prefers green tea in the morning, never coffee`, ["prefs"]],
    [`${token}: Alice felt thrilled and proud after her marathon, she loved the crowd`, ["feelings"]],
    [`${token}: To deploy the garden app, run the tests, then build the image, then push it step by step`, ["howto"]],
    [`${token}: Yesterday Alice met Bruno at the harbour cafe and they talked about sailing`, ["events"]],
];

async function main() {
    await call("health", () => om.health());
    await call("getSectors", () => om.getSectors());
    for (const [i, [content, tags]] of USER_MEMORIES.entries()) {
        const added = await call(`add#${i}`, () => om.add(content, { tags, metadata: { source: "sdk" }, user_id: user }));
        if (added) ids[`user${i}`] = added.id;
    }
    // Without a user_id, as most of the SDK's calls are (getAll and querySector cannot name one): the default tenant
    const plain = await call("add#plain", () => om.add(`${token}: the lighthouse of Vigo is painted red and white`));
    if (plain) ids.plain = plain.id;
    await call("query", () => om.query(`${token} green tea morning`, { k: 5, filters: { user_id: user } }));
    await call("querySector", () => om.querySector(`${token} lighthouse Vigo painted`, "semantic", 5));
    await call("reinforce", () => om.reinforce(ids.user0, 0.3));
    await call("getAll", () => om.getAll({ limit: 50 }));
    await call("getAll#sector", () => om.getAll({ limit: 50, sector: "semantic" }));
    await call("getBySector", () => om.getBySector("semantic", 50, 0));
    await call("getUserMemories", () => om.getUserMemories(user));
    await call("getUserMemories#page1", () => om.getUserMemories(user, { limit: 2 }));
    await call("getUserMemories#page2", () => om.getUserMemories(user, { limit: 2, offset: 2 }));
    await call("getUserSummary", () => om.getUserSummary(user));
    await call("regenerateUserSummary", () => om.regenerateUserSummary(user));
    await call("update", () => om.update(ids.user3, { content: `${token}: Alice met Bruno at the harbour cafe on Sunday and planned a sailing trip` }));
    await call("delete", () => om.delete(ids.user1));
    await call("getUserMemories#after", () => om.getUserMemories(user));
    await call("getStats", () => om.getStats());

    await call("lgmStore#observe", () => om.lgmStore({ node_id: "observe", namespace: ns, content: `${token}: the user opened the billing page twice and hesitated at checkout` }));
    await call("lgmStore#plan", () => om.lgmStore({ node: "plan", namespace: ns, graph_id: "g1", content: `${token}: plan to offer the user a discount code at checkout` }));
    await call("lgmStore#act", () => om.lgmStore({ node_id: "act", namespace: ns, content: `${token}: sent the discount code by email`, metadata: { step: 3 } }));
    await call("lgmStore#emotion", () => om.lgmStore({ node_id: "emotion", namespace: ns, content: `${token}: the user sounded frustrated about the price` }));
    await call("lgmStore#elsewhere", () => om.lgmStore({ node_id: "observe", namespace: `${ns}-other`, content: `${token}: the user opened the billing page in another namespace` }));
    await call("lgmRetrieve#query", () => om.lgmRetrieve({ node_id: "observe", namespace: ns, query: `${token} billing page checkout`, k: 5 }));
    await call("lgmRetrieve#recent", () => om.lgmRetrieve({ node_id: "plan", namespace: ns }));
    await call("lgmRetrieve#graph", () => om.lgmRetrieve({ node: "plan", namespace: ns, graph_id: "g1", include_metadata: true }));
    await call("lgmGetContext", () => om.lgmGetContext({ node_id: "observe", namespace: ns }));
    await call("lgmCreateReflection", () => om.lgmCreateReflection({ node_id: "reflect", namespace: ns }));
    await call("lgmCreateReflection#content", () => om.lgmCreateReflection({ node_id: "reflect", namespace: ns, content: `${token}: discounts calm frustrated users at checkout` }));
    await call("lgmGetConfig", () => om.lgmGetConfig());
    process.stdout.write(JSON.stringify({ ids, calls }) + "\n");
}

main().catch((err) => {
    process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
    process.exit(1);
});
