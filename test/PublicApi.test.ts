/**
 * The public API names only what a user can name: every type a public module's declarations
 * refer to is either declared outside `src/internal/` or exported, under some name, by a
 * public module (and then the declaration of that type is held to the same rule). A service
 * of `src/internal/` in a layer's requirements or outputs is one a user can neither import
 * nor provide, since `package.json` closes `./internal/*`.
 *
 * The declarations are the ones `npm run build` writes (`tsc -p tsconfig.build.json`),
 * emitted in memory and read back by a second program, as an app's compiler reads them.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import ts from "typescript"

const root = path.resolve(import.meta.dirname, "..")
// a directory that is never written: the declarations stay in memory, yet resolve `effect`
// from the project's node_modules and take its package.json's module format
const out = path.join(root, ".public-api-declarations")
const internalDir = path.join(out, "internal") + path.sep

/** The declarations of `src/`, as the build emits them, by file name. */
const emitDeclarations = (): ReadonlyMap<string, string> => {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    path.join(root, "tsconfig.build.json"),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"))
      }
    }
  )!
  const program = ts.createProgram(parsed.fileNames, {
    ...parsed.options,
    noEmit: false,
    declaration: true,
    emitDeclarationOnly: true,
    declarationMap: false,
    sourceMap: false,
    outDir: out
  })
  const files = new Map<string, string>()
  const result = program.emit(undefined, (fileName, text) => files.set(path.resolve(fileName), text))
  const problems = [...ts.getPreEmitDiagnostics(program), ...result.diagnostics].map((diagnostic) =>
    ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")
  )
  assert.deepStrictEqual(problems, [], "the declarations do not build")
  return files
}

/** What `package.json` exports: `.` and `./*` (every module directly under src/), not `./internal/*`. */
const publicModules = (): ReadonlyArray<string> => {
  const exports = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).exports
  assert.strictEqual(exports["."]["leasehold-source"], "./src/index.ts")
  assert.strictEqual(exports["./*"]["leasehold-source"], "./src/*.ts")
  assert.strictEqual(exports["./internal/*"], null)
  return fs
    .readdirSync(path.join(root, "src"))
    .filter((file) => file.endsWith(".ts"))
    .map((file) => path.join(out, file.replace(/\.ts$/, ".d.ts")))
}

interface Leak {
  readonly where: string
  readonly name: string
  readonly declaredIn: string
}

/** Every type the public declarations refer to that is declared in src/internal/ and exported by no public module. */
const leaks = (): { readonly leaks: ReadonlyArray<Leak>; readonly checked: number } => {
  const declarations = emitDeclarations()
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: ["node"],
    strict: true,
    noEmit: true
  }
  const host = ts.createCompilerHost(options)
  const { fileExists, readFile, getSourceFile, directoryExists } = host
  const directories = new Set([...declarations.keys()].flatMap((file) => [path.dirname(file), out]))
  host.directoryExists = (name) => directories.has(path.resolve(name)) || directoryExists?.call(host, name) === true
  host.fileExists = (fileName) => declarations.has(path.resolve(fileName)) || fileExists.call(host, fileName)
  host.readFile = (fileName) => declarations.get(path.resolve(fileName)) ?? readFile.call(host, fileName)
  host.getSourceFile = (fileName, languageVersion, ...rest) => {
    const text = declarations.get(path.resolve(fileName))
    return text === undefined
      ? getSourceFile.call(host, fileName, languageVersion, ...rest)
      : ts.createSourceFile(fileName, text, languageVersion, true)
  }
  const publicFiles = publicModules()
  for (const file of publicFiles) assert.isTrue(declarations.has(file), `no declarations for ${file}`)
  const program = ts.createProgram(publicFiles, options, host)
  // every reference resolves: a module or a type the walk could not find would pass unseen
  assert.deepStrictEqual(
    publicFiles.flatMap((file) =>
      program
        .getSemanticDiagnostics(program.getSourceFile(file))
        .map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"))
    ),
    [],
    "the declarations do not type-check"
  )
  const checker = program.getTypeChecker()
  const resolve = (symbol: ts.Symbol): ts.Symbol =>
    symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol
  // a file's module (`import * as X`), not a namespace merged with a service class
  const isFile = (symbol: ts.Symbol) => (symbol.declarations ?? []).some(ts.isSourceFile)
  const isInternal = (symbol: ts.Symbol) =>
    (symbol.declarations ?? []).some((declaration) =>
      path.resolve(declaration.getSourceFile().fileName).startsWith(internalDir)
    )

  // every symbol a user can reach by name from a public module, through namespaces too
  const nameable = new Set<ts.Symbol>()
  const reach = (symbol: ts.Symbol) => {
    const target = resolve(symbol)
    if (nameable.has(target)) return
    nameable.add(target)
    const members = isFile(target) ? checker.getExportsOfModule(target) : [...(target.exports?.values() ?? [])]
    for (const member of members) reach(member)
    // `type X = Internal.Y` names Y
    for (const declaration of target.declarations ?? []) {
      if (
        ts.isTypeAliasDeclaration(declaration) &&
        ts.isTypeReferenceNode(declaration.type) &&
        declaration.type.typeArguments === undefined
      ) {
        const named = checker.getSymbolAtLocation(declaration.type.typeName)
        if (named !== undefined) reach(named)
      }
    }
  }
  for (const file of publicFiles) {
    const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)
    if (module !== undefined) reach(module)
  }

  const found: Array<Leak> = []
  let checked = 0
  const judge = (where: ts.Node, symbol: ts.Symbol | undefined) => {
    if (symbol === undefined) return
    const target = resolve(symbol)
    checked++
    if (isFile(target) || !isInternal(target) || nameable.has(target)) return
    const source = where.getSourceFile()
    const { line } = source.getLineAndCharacterOfPosition(where.getStart())
    found.push({
      where: `${path.relative(out, source.fileName)}:${line + 1}`,
      name: where.getText(),
      declaredIn: path.relative(out, target.declarations![0]!.getSourceFile().fileName)
    })
  }
  const walk = (node: ts.Node) => {
    if (ts.isTypeReferenceNode(node)) judge(node, checker.getSymbolAtLocation(node.typeName))
    else if (ts.isTypeQueryNode(node)) judge(node, checker.getSymbolAtLocation(node.exprName))
    else if (ts.isImportTypeNode(node)) {
      const type = checker.getTypeFromTypeNode(node)
      judge(
        node,
        node.qualifier === undefined
          ? type.aliasSymbol
          : (checker.getSymbolAtLocation(node.qualifier) ?? type.aliasSymbol ?? type.getSymbol())
      )
    }
    ts.forEachChild(node, walk)
  }
  for (const file of publicFiles) walk(program.getSourceFile(file)!)
  // a type of src/internal/ that a public module exports shows its own declaration to users
  for (const symbol of nameable) {
    if (isFile(symbol) || !isInternal(symbol)) continue
    for (const declaration of symbol.declarations ?? []) walk(declaration)
  }
  return { leaks: found, checked }
}

describe("the public API", () => {
  it("refers to no type of src/internal/ that a user cannot name", () => {
    const result = leaks()
    // the walk saw the declarations: every layer and service of the public modules is a reference
    assert.isAbove(result.checked, 500)
    assert.deepStrictEqual(
      result.leaks.map((leak) => `${leak.where}: ${leak.name} (declared in ${leak.declaredIn})`),
      []
    )
  }, 180_000)
})
