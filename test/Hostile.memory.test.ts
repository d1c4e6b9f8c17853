import { memory } from "./hostile/fixture.js"
import { hostileInputSuite } from "./hostile/inputSuite.js"

hostileInputSuite(memory())
