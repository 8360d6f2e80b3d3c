// Validates Amazon States Language documents with AWS's amazon-states-language-service (the validation of
// the Step Functions editor and the AWS Toolkit) and asl-validator. Reads a JSON array of definitions
// (strings) on stdin; prints one JSON array of {aslValidator: [...], languageService: [...]} findings.
const { getLanguageService, TextDocument } = require("amazon-states-language-service");
const { TextDocument: Document } = require("vscode-languageserver-textdocument");
const aslValidator = require("asl-validator").default ?? require("asl-validator");

async function findings(text, index) {
  const { isValid, errors } = aslValidator(JSON.parse(text));
  const service = getLanguageService({});
  const document = Document.create(`file:///definition-${index}.asl.json`, "json", 1, text);
  const diagnostics = await service.doValidation(document, service.parseJSONDocument(document));
  return {
    aslValidator: isValid ? [] : errors.map((error) => JSON.stringify(error)),
    languageService: diagnostics.map((d) => `${d.severity} ${d.message} @${d.range.start.line}:${d.range.start.character}`),
  };
}

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", async () => {
  const definitions = JSON.parse(input);
  console.log(JSON.stringify(await Promise.all(definitions.map(findings))));
});
