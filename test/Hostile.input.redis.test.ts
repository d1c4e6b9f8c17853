import { redis } from "./hostile/fixture.js"
import { hostileInputSuite } from "./hostile/inputSuite.js"

hostileInputSuite(redis())
